#!/usr/bin/env python3
"""Build OUT/multiio/: a TorchScript test module that exercises every IValue kind the binding
passes in or out (tensors of every dtype, tuples, lists, dicts with str and int keys, str,
bool, int, float, Optional/None), outputs that alias or view their input, non-contiguous
outputs, script errors, a method of controllable duration, and real parameters.

Files:
  model.pt   the scripted MultiIO module below (eval mode).
  ref.json   deterministic test cases with inputs and expected outputs, format below.

ref.json format
---------------
  {"cases": [{"name": "...", "method": "...", "inputs": [ARG, ...], "output": VALUE}, ...]}
A case whose call must fail has "error": "<substring of the error message>" instead of
"output". "inputs" are the method's positional arguments after self. Values:
  tensor       {"dtype": "float32", "shape": [2, 3], "data": [flat, row-major, numbers]}
               dtype is one of float32 float16 bfloat16 float64 int64 int32 uint8 int8 bool;
               a 0-dim tensor has "shape": [] and one element in "data". Float data are the
               exact values (a float32 is written as the float64 equal to it), so parsing
               as float64 and converting to the dtype reproduces the tensor bit for bit;
               bool data are true/false.
  tuple        {"tuple": [VALUE, ...]}
  list         {"list": [VALUE, ...]}
  dict         {"dict": {"key": VALUE, ...}}: str keys. With int keys the keys are decimal
               strings and the object also has "key_type": "int". Entries are in the
               module's insertion order (TorchScript dicts are ordered).
  None         null
  str, bool    plain JSON strings and true/false
  int, float   plain JSON numbers; a float always contains "." or an exponent (2.0, not 2)
               and an int never does, which is how the two are told apart.
Expected outputs come from model.pt itself on this machine (2 threads); another thread
count may change float results in the last bits, so compare floats with a small tolerance
(verify.py uses rtol 1e-5, atol 1e-6).
"""
import os
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn
from torch import Tensor

import common

NAME = "multiio"

# Codes of MultiIO.cast, and the dtype names of the JSON encoding.
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64,
          torch.int32, torch.uint8, torch.int8, torch.bool]
DTYPE_NAMES = {dtype: str(dtype).removeprefix("torch.") for dtype in DTYPES}


class MultiIO(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, pair: Tuple[Tensor, Tensor], named: Dict[str, Tensor], items: List[Tensor],
                scale: float, k: int
                ) -> Tuple[Tuple[Tensor, Tensor], Dict[str, Tensor], List[Tensor]]:
        doubled: Dict[str, Tensor] = {}
        total = torch.tensor(0.0)
        for key, value in named.items():
            doubled[key] = value * 2
            total = total + value.sum()
        doubled["sum"] = total
        shifted = [t + k for t in items] + [torch.stack(items).sum(0)]
        return (pair[0] + pair[1], pair[0] * scale), doubled, shifted

    @torch.jit.export
    def scalars(self, s: str, flag: bool, n: int, f: float, opt: Optional[Tensor]
                ) -> Tuple[str, bool, int, float, Optional[Tensor], List[int], Dict[int, str]]:
        tripled: Optional[Tensor] = None
        if opt is not None:
            tripled = opt * 3
        return s + "!", not flag, n * 2, f / 2, tripled, [n, n + 1], {n: s}

    @torch.jit.export
    def identity(self, x: Tensor) -> Tensor:
        return x  # the output IS the input: the binding must not hand back the caller's memory

    @torch.jit.export
    def view(self, x: Tensor) -> Tensor:
        return x[0]  # shares the input's storage

    @torch.jit.export
    def transpose(self, x: Tensor) -> Tensor:
        return x.t()  # non-contiguous: strides are swapped, the data is not moved

    @torch.jit.export
    def cast(self, x: Tensor, dtype_code: int) -> Tensor:
        # Spelled out because TorchScript has no typed list of dtypes; codes follow DTYPES.
        if dtype_code == 0:
            return x.to(torch.float32)
        if dtype_code == 1:
            return x.to(torch.float16)
        if dtype_code == 2:
            return x.to(torch.bfloat16)
        if dtype_code == 3:
            return x.to(torch.float64)
        if dtype_code == 4:
            return x.to(torch.int64)
        if dtype_code == 5:
            return x.to(torch.int32)
        if dtype_code == 6:
            return x.to(torch.uint8)
        if dtype_code == 7:
            return x.to(torch.int8)
        if dtype_code == 8:
            return x.to(torch.bool)
        raise ValueError("unknown dtype code")

    @torch.jit.export
    def double_it(self, x: Tensor) -> Tensor:
        return x * 2  # keeps the dtype, except bool, which type promotion turns into int64

    @torch.jit.export
    def check(self, x: Tensor) -> Tensor:
        if bool(x.sum() < 0):
            raise ValueError("negative input")
        return x + 1

    @torch.jit.export
    def slow(self, x: Tensor, iters: int) -> Tensor:
        for _ in range(iters):
            x = x * 1.0000001 + 0
        return x

    @torch.jit.export
    def linear(self, x: Tensor) -> Tensor:
        return self.fc(x)


def encode(value):
    """Python/torch value -> the JSON form documented above."""
    if isinstance(value, Tensor):
        return {"dtype": DTYPE_NAMES[value.dtype], "shape": list(value.shape),
                "data": value.reshape(-1).tolist()}
    if isinstance(value, tuple):
        return {"tuple": [encode(v) for v in value]}
    if isinstance(value, list):
        return {"list": [encode(v) for v in value]}
    if isinstance(value, dict):
        out = {"dict": {str(k): encode(v) for k, v in value.items()}}
        if value and all(isinstance(k, int) for k in value):
            out["key_type"] = "int"
        return out
    if value is None or isinstance(value, (str, bool, int, float)):
        return value  # json writes floats via repr(), which always has "." or an exponent
    raise TypeError(f"cannot encode {type(value).__name__}")


def decode(value):
    """The JSON form documented above -> Python/torch value (the inverse of encode)."""
    if isinstance(value, dict):
        if "dtype" in value:
            dtype = next(d for d, n in DTYPE_NAMES.items() if n == value["dtype"])
            return torch.tensor(value["data"], dtype=dtype).reshape(value["shape"])
        if "tuple" in value:
            return tuple(decode(v) for v in value["tuple"])
        if "list" in value:
            return [decode(v) for v in value["list"]]
        key = int if value.get("key_type") == "int" else str
        return {key(k): decode(v) for k, v in value["dict"].items()}
    return value


def cases():
    """(name, method, inputs, expected error substring or None) for every ref case."""
    torch.manual_seed(3)
    pair = (torch.randn(2, 3), torch.randn(2, 3))
    named = {"a": torch.randn(2, 2), "b": torch.randn(3)}
    items = [torch.randn(2, 2) for _ in range(3)]
    opt = torch.randn(3)
    lin = torch.randn(5, 4)
    matrix = torch.randn(3, 4)
    # In [0, 60): every cast (uint8 and int8 included) is well defined and doubling fits int8;
    # the zero gives the bool cast a False.
    castable = torch.rand(2, 3) * 60
    castable[0, 0] = 0.0
    yield "forward", "forward", [pair, named, items, 2.0, 3], None
    yield "scalars_opt", "scalars", ["héllo", True, 7, 5.0, opt], None
    yield "scalars_none", "scalars", ["", False, -3, -1.5, None], None
    yield "linear", "linear", [lin], None
    yield "identity", "identity", [matrix], None
    yield "view", "view", [matrix], None
    yield "transpose", "transpose", [matrix], None
    for code, dtype in enumerate(DTYPES):
        yield f"cast_{DTYPE_NAMES[dtype]}", "cast", [castable, code], None
        yield f"double_it_{DTYPE_NAMES[dtype]}", "double_it", [castable.to(dtype)], None
    yield "cast_unknown", "cast", [castable, len(DTYPES)], "unknown dtype code"
    yield "check_ok", "check", [matrix.abs()], None
    yield "check_negative", "check", [-matrix.abs()], "negative input"
    yield "slow", "slow", [matrix, 10], None


def main():
    args = common.parse_args(__doc__.splitlines()[0])
    with common.model_dir(args.out, NAME) as d:
        torch.manual_seed(0)  # the Linear layer's weights
        model = common.save_scripted(MultiIO(), os.path.join(d, "model.pt"))
        refs = []
        for name, method, inputs, error in cases():
            case = {"name": name, "method": method, "inputs": encode(inputs)["list"]}
            try:
                with torch.inference_mode():
                    case["output"] = encode(getattr(model, method)(*inputs))
            except torch.jit.Error as e:
                if error is None or error not in str(e):
                    raise
                case["error"] = error
            else:
                assert error is None, f"{name}: expected an error containing {error!r}"
            refs.append(case)
        common.write_json(os.path.join(d, "ref.json"), {"cases": refs})


if __name__ == "__main__":
    main()
