#!/usr/bin/env python3
"""Build OUT/attention/: TorchScript files that only a LibTorch 2.x can load.

Since PyTorch 2.0, nn.MultiheadAttention, nn.TransformerEncoderLayer and every Hugging Face
transformer call aten::scaled_dot_product_attention, an op LibTorch 1.13 does not know. Each
subdirectory holds one scripted module, saved by the pinned torch, with a reference input and
the output the reloaded module gives for it (the torch package's tests compare within 1e-5):

  sdpa/     F.scaled_dot_product_attention over learned q, k, v projections
  encoder/  nn.TransformerEncoder, two layers, batch_first
  mha/      nn.MultiheadAttention (self-attention), returning the attention output

forward(x: float32 [2, 7, 32]) -> float32 [2, 7, 32]. Weights are random (seeded): these
files test the runtime, not a task.
"""
import os

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import common

NAME = "attention"
D, HEADS = 32, 4


class SDPA(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = HEADS
        self.qkv = nn.Linear(D, 3 * D)
        self.out = nn.Linear(D, D)

    def forward(self, x: Tensor) -> Tensor:
        n, length, d = x.shape
        qkv = self.qkv(x).view(n, length, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        h = F.scaled_dot_product_attention(q, k, v)
        return self.out(h.transpose(1, 2).reshape(n, length, d))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(D, HEADS, dim_feedforward=64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.encoder(x)


class MHA(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(D, HEADS, batch_first=True)

    def forward(self, x: Tensor) -> Tensor:
        return self.attn(x, x, x, need_weights=False)[0]


def main():
    args = common.parse_args(__doc__.splitlines()[0])
    torch.manual_seed(0)
    x = torch.randn(2, 7, D)
    with common.model_dir(args.out, NAME) as d:
        for name, module in (("sdpa", SDPA()), ("encoder", Encoder()), ("mha", MHA())):
            sub = os.path.join(d, name)
            os.makedirs(sub)
            loaded = common.save_scripted(module, os.path.join(sub, "model.pt"))
            # Under inference mode, as torchd runs it (the encoder then takes its fused path).
            with torch.inference_mode():
                y = loaded(x)
            np.save(os.path.join(sub, "ref_input.npy"), x.numpy())
            np.save(os.path.join(sub, "ref_output.npy"), y.numpy())
            print(f"attention/{name}: output {tuple(y.shape)}")


if __name__ == "__main__":
    main()
