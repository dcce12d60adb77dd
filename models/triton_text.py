#!/usr/bin/env python3
"""Build OUT/triton_text/: transformer-deploy's Triton layout of a text classifier, small and offline.

Files:
  repo/transformer_tokenize/     backend "python", max_batch_size 0: 1/model.py, a
                                 TritonPythonModel written to Triton's contract, loads the
                                 tokenizer saved beside it in 1/ (onnx/bert's vocab.txt and
                                 tokenizer.json, all-MiniLM-L6-v2's uncased WordPiece) and turns
                                 TEXT (TYPE_STRING [-1]) into input_ids, token_type_ids and
                                 attention_mask (TYPE_INT64 [-1, -1]).
  repo/transformer_onnx_model/   onnx/repos/bert's, unchanged (model.bin, onnxruntime_onnx).
  repo/transformer_inference/    platform "ensemble": TEXT -> tokenize -> model -> output.
  refs.json                      {"cases": [{"name", "texts", "tokens": {name: file.npy},
                                 "output": file.npy}]}: the tokenizer's ids and onnxruntime's
                                 logits in Python, for each text alone and the three together.

Needs OUT/onnx (models/onnx_zoo.py).
"""
import os
import shutil

import numpy as np
import onnxruntime as ort
from transformers import BertTokenizerFast

import common

NAME = "triton_text"
TEXTS = ["This live event is great. I will sign-up for Infinity.", "a dull, slow and far too long film", "fine"]
TOKENS = ["input_ids", "token_type_ids", "attention_mask"]

MODEL_PY = '''"""Tokenize TEXT for the classifier, as transformer-deploy's tokenizer model does on Triton."""
import os
from typing import Dict, List

import numpy as np
import triton_python_backend_utils as pb_utils
from transformers import AutoTokenizer, PreTrainedTokenizer, TensorType


class TritonPythonModel:
    tokenizer: PreTrainedTokenizer

    def initialize(self, args: Dict[str, str]) -> None:
        # The tokenizer's files are saved beside this file, in the version's directory.
        path: str = os.path.join(args["model_repository"], args["model_version"])
        self.tokenizer = AutoTokenizer.from_pretrained(path)

    def execute(self, requests) -> "List[pb_utils.InferenceResponse]":
        responses = []
        for request in requests:
            query = [t.decode("UTF-8") for t in pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy().tolist()]
            tokens: Dict[str, np.ndarray] = self.tokenizer(
                text=query, padding=True, truncation=True, max_length=128, return_tensors=TensorType.NUMPY)
            outputs = [pb_utils.Tensor(name, tokens[name].astype(np.int64)) for name in self.tokenizer.model_input_names]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
'''

TOKENIZE_CONFIG = '''name: "transformer_tokenize"
max_batch_size: 0
backend: "python"

input [
  {
    name: "TEXT"
    data_type: TYPE_STRING
    dims: [ -1 ]
  }
]

output [
  {
    name: "input_ids"
    data_type: TYPE_INT64
    dims: [ -1, -1 ]
  },
  {
    name: "token_type_ids"
    data_type: TYPE_INT64
    dims: [ -1, -1 ]
  },
  {
    name: "attention_mask"
    data_type: TYPE_INT64
    dims: [ -1, -1 ]
  }
]

instance_group [
  {
    count: 1
    kind: KIND_CPU
  }
]
'''

ENSEMBLE_CONFIG = '''name: "transformer_inference"
max_batch_size: 0
platform: "ensemble"

input [
  {
    name: "TEXT"
    data_type: TYPE_STRING
    dims: [ -1 ]
  }
]

output {
  name: "output"
  data_type: TYPE_FP32
  dims: [ -1, 2 ]
}

ensemble_scheduling {
  step [
    {
      model_name: "transformer_tokenize"
      model_version: -1
      input_map {
        key: "TEXT"
        value: "TEXT"
      }
      output_map [
        {
          key: "input_ids"
          value: "input_ids"
        },
        {
          key: "token_type_ids"
          value: "token_type_ids"
        },
        {
          key: "attention_mask"
          value: "attention_mask"
        }
      ]
    },
    {
      model_name: "transformer_onnx_model"
      model_version: -1
      input_map [
        {
          key: "input_ids"
          value: "input_ids"
        },
        {
          key: "token_type_ids"
          value: "token_type_ids"
        },
        {
          key: "attention_mask"
          value: "attention_mask"
        }
      ]
      output_map {
        key: "output"
        value: "output"
      }
    }
  ]
}
'''


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def main():
    args = common.parse_args(__doc__.splitlines()[0])
    bert = os.path.join(args.out, "onnx", "bert")
    with common.model_dir(args.out, NAME) as d:
        repo = os.path.join(d, "repo")
        tok_dir = os.path.join(repo, "transformer_tokenize", "1")
        os.makedirs(tok_dir)
        tok = BertTokenizerFast(vocab_file=os.path.join(bert, "vocab.txt"),
                                tokenizer_file=os.path.join(bert, "tokenizer.json"), do_lower_case=True)
        tok.save_pretrained(tok_dir)
        write(os.path.join(tok_dir, "model.py"), MODEL_PY)
        write(os.path.join(repo, "transformer_tokenize", "config.pbtxt"), TOKENIZE_CONFIG)
        shutil.copytree(os.path.join(args.out, "onnx", "repos", "bert", "transformer_onnx_model"),
                        os.path.join(repo, "transformer_onnx_model"))
        write(os.path.join(repo, "transformer_inference", "config.pbtxt"), ENSEMBLE_CONFIG)
        os.makedirs(os.path.join(repo, "transformer_inference", "1"))

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        sess = ort.InferenceSession(os.path.join(repo, "transformer_onnx_model", "1", "model.bin"), opts,
                                    providers=["CPUExecutionProvider"])
        # The saved tokenizer, as model.py loads it.
        saved = BertTokenizerFast.from_pretrained(tok_dir)
        cases = [(f"alone{i}", [t]) for i, t in enumerate(TEXTS)] + [("batch", TEXTS)]
        refs = []
        for name, texts in cases:
            tokens = saved(texts, padding=True, truncation=True, max_length=128, return_tensors="np")
            entry = {"name": name, "texts": texts, "tokens": {}, "output": f"{name}_output.npy"}
            feed = {}
            for k in TOKENS:
                feed[k] = tokens[k].astype(np.int64)
                entry["tokens"][k] = f"{name}_{k}.npy"
                np.save(os.path.join(d, entry["tokens"][k]), feed[k])
            np.save(os.path.join(d, entry["output"]), sess.run(["output"], feed)[0])
            refs.append(entry)
        common.write_json(os.path.join(d, "refs.json"), {"cases": refs})
    print(f"triton_text: {os.path.join(args.out, NAME)}", flush=True)


if __name__ == "__main__":
    main()
