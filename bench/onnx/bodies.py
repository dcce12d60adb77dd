"""The request bodies of bench/onnx.sh and bench/onnx-ab.sh, and the ceiling's model.

  .venv/bin/python bench/onnx/bodies.py OUT

writes OUT/mnist.json (784 float32s, as Python prints them), OUT/bert.json (sequence 16),
OUT/trivial.json (one float32), and a Triton repository OUT/repo/trivial5 and trivial1 of
one model that adds its [1] input to itself: a forward of about a microsecond, so that its
served rate is what torchd's HTTP, JSON and request path allow any model (five instances as
ONNX MNIST has, one as the BERT classifier has).
"""
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

out = sys.argv[1]
rng = np.random.default_rng(0)
mnist = {"inputs": [{"name": "input.1", "shape": [1, 1, 28, 28], "datatype": "FP32",
                     "data": rng.standard_normal(784).astype(np.float32).round(4).tolist()}]}
ids = rng.integers(1000, 2000, 16).tolist()
bert = {"inputs": [{"name": "input_ids", "shape": [1, 16], "datatype": "INT64", "data": ids},
                   {"name": "attention_mask", "shape": [1, 16], "datatype": "INT64", "data": [1] * 16},
                   {"name": "token_type_ids", "shape": [1, 16], "datatype": "INT64", "data": [0] * 16}]}
trivial = {"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [0.5]}]}
for name, body in (("mnist", mnist), ("bert", bert), ("trivial", trivial)):
    with open(f"{out}/{name}.json", "w") as f:
        json.dump(body, f)

graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "trivial",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
onnx.checker.check_model(model)
for name, count in (("trivial5", 5), ("trivial1", 1)):
    os.makedirs(f"{out}/repo/{name}/1", exist_ok=True)
    onnx.save(model, f"{out}/repo/{name}/1/model.onnx")
    with open(f"{out}/repo/{name}/config.pbtxt", "w") as f:
        f.write(f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 0\n'
                'input [{ name: "x" data_type: TYPE_FP32 dims: [ 1 ] }]\n'
                'output [{ name: "y" data_type: TYPE_FP32 dims: [ 1 ] }]\n'
                f'instance_group [{{ count: {count} kind: KIND_CPU }}]\n')
