#!/usr/bin/env python3
"""Export zoo models as AOTInductor packages: OUT/<name>/model.pt2 beside model.pt, and the
captioner's encoder as OUT/captioner/encoder.pt2 (its decoding loop stays in model.pt).

Each package is exported with torch.export from the model's eager module and the weights of
the TorchScript model.pt already in OUT/<name>/, with a dynamic batch dimension
[1, BATCH_MAX] (and, for the text models, a dynamic sequence length [1, SEQ_MAX]), and
compiled by torch._inductor.aoti_compile_and_package. For CPU it is compiled for a stated
baseline instead of the building machine (-march=native): MARCH (x86-64-v3: AVX2, FMA, BMI2,
F16C) with AVX2 vectorization (SIMDLEN 256), so a package built on an AVX-512 machine serves on
any x86-64-v3 one. torchd refuses a package whose baseline the host lacks.

The package's metadata carries what torchd needs and AOTInductor does not expose: the input
specs with each dimension's bounds (torchd.inputs), the output specs (torchd.outputs), the
-march (torchd.march) and the precision it computes in (torchd.precision).

--dtype int8 (resnet18 and efficientnet_lite0, CPU) quantizes the model statically to int8
(compile_int8: PyTorch's PT2E flow from torchao with the x86 Inductor quantizer, calibrated on
50 of the gate images' photographs; the recipe per model in INT8) into model_int8.pt2; it needs
torchao (make models-int8).

--dtype bf16 (or fp16) exports the model under autocast to that dtype, as torchd runs
TorchScript in bf16: matrix products and convolutions in it, the weights kept float32 and cast
where autocast uses them; inputs and outputs stay float32, so handlers and clients are
unchanged. The submodules named by fp32_modules in the model's archive config
(models/configs/NAME.toml) run with autocast off, cast in and out (mixed precision); torchd
keeps the same ones in float32 when it serves the TorchScript model.pt in bf16, and the
package records them (torchd.fp32_modules). --device cuda
compiles for CUDA (on a machine with a GPU and the CUDA torch); --models picks the models.

Compiling takes a minute or more per model on 2 cores, so packages are cached in CACHE
(default ~/.cache/torchd/pt2, beside third_party/get-libtorch.sh's wheels, so that a fresh
clone on the same machine reuses them), keyed by a hash of the code that builds and compiles the model, its
weights file, the torch version and the compile settings: an unchanged model is copied, not
recompiled. The four most recently used packages of each model, device and dtype are kept.

Files, per model (the references only for the default CPU fp32 package):
  model.pt2                 the CPU fp32 package; model_bf16.pt2, model_cuda.pt2,
                            model_cuda_fp16.pt2, ... for the other devices and dtypes.
                            The captioner's are encoder.pt2, encoder_bf16.pt2, ...: images
                            [N, 3, 64, 64] -> the features [N, 128] model.pt's decode takes.
  pt2_ref_input.npy         BATCH_MAX rows of inputs (an image model's), or for a text model
  pt2_ref_input_ids.npy     BATCH_MAX rows of token ids and their attention mask, padded to
  pt2_ref_attention_mask.npy  the longest; the first N rows trimmed to their own longest are
                            what batch N runs on.
  pt2_ref_output_bN.npy     eager PyTorch's output for the first N rows, N in 1, 2, 7, BATCH_MAX
                            (the captioner's: its encoder's features).
  pt2_ref_pooled_bN.npy     MiniLM: the mean-pooled, L2-normalized embeddings of those outputs,
                            as the text_embedding handler answers.
  bf16_gate_images.npy      EfficientNet-Lite0: the bf16 accuracy gate's 200 images, uint8
                            [200, 3, 224, 224] after Resize(256) and CenterCrop(224): the
                            photographs of PyPI's ai-benchmark and their mirror images.

Usage: .venv/bin/python models/pt2.py --out DIR [--models digits,resnet18] [--cache DIR]
                                      [--device cpu|cuda] [--dtype fp32|bf16|fp16|int8]
"""
import hashlib
import inspect
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np
import torch
from torch import nn

import common

HERE = os.path.dirname(os.path.abspath(__file__))
MARCH = "x86-64-v3"
SIMDLEN = 256
REF_BATCHES = (1, 2, 7)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "int8": torch.int8}


class Model:
    """One zoo model to export: its eager module, batch and sequence maxima, input names, its
    reference rows (numpy arrays, BATCH_MAX rows each) and the package's file stem."""

    def __init__(self, module, batch_max, inputs, rows, seq_max=None, weights="model.pt", stem="model"):
        self.module, self.batch_max, self.inputs, self.rows = module, batch_max, inputs, rows
        self.seq_max, self.weights, self.stem = seq_max, weights, stem


def rows(x, n):
    """The first n rows of x, repeating x when it has fewer."""
    reps = -(-n // len(x))
    return np.concatenate([x] * reps)[:n]


def scripted_weights(module, d):
    module.load_state_dict(torch.jit.load(os.path.join(d, "model.pt")).state_dict())
    return module.eval()


def digits(d):
    from digits import DigitsCNN
    x = rows(np.load(os.path.join(d, "heldout.npy")), 64)
    return Model(scripted_weights(DigitsCNN(), d), 64, ["input__0"], [x])


def resnet18(d):
    import torchvision
    torch.manual_seed(1)
    x = torch.randn(32, 3, 224, 224).numpy()
    return Model(scripted_weights(torchvision.models.resnet18(weights=None), d), 32, ["input__0"], [x])


def efficientnet_lite0(d):
    import glob
    import efficientnet
    paths = sorted(glob.glob(os.path.join(d, "images", "*.jpg")))
    x = rows(np.stack([efficientnet.preprocess(p).numpy() for p in paths]), 32)
    return Model(scripted_weights(efficientnet.build_model(), d), 32, ["input__0"], [x])


def pad(seqs, width=None):
    width = width or max(len(s) for s in seqs)
    ids = np.zeros((len(seqs), width), dtype=np.int64)
    mask = np.zeros((len(seqs), width), dtype=np.int64)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = s
        mask[i, :len(s)] = 1
    return ids, mask


def textcls(d):
    import textcls as tc
    with open(os.path.join(d, "vocab.txt"), encoding="utf-8") as f:
        vocab_size = sum(1 for _ in f)
    with open(os.path.join(d, "heldout.json"), encoding="utf-8") as f:
        seqs = [item["ids"] for item in json.load(f)["items"]]
    # Short and long sentences mixed, so every batch is padded.
    seqs = sorted(seqs, key=len)
    seqs = [seqs[(i * 97) % len(seqs)] for i in range(64)]
    module = scripted_weights(tc.TextClassifier(vocab_size), d)
    return Model(module, 64, ["input_ids", "attention_mask"], list(pad(seqs)), seq_max=tc.MAX_LENGTH)


def minilm(d):
    import minilm as ml
    from transformers import AutoModel
    with open(os.path.join(d, "tokenizer_refs.json"), encoding="utf-8") as f:
        refs = json.load(f)
    seqs = [item["ids"] for item in refs["items"] if len(item["ids"]) <= 128][:64]
    bert = AutoModel.from_pretrained(ml.package_dir(), attn_implementation="sdpa").eval()
    return Model(ml.TokenEmbeddings(bert).eval(), 64, ["input_ids", "attention_mask"], list(pad(seqs)),
                 seq_max=refs["max_length"])


def captioner(d):
    """The captioner's encoder alone (images -> features, Captioner.encode) as encoder.pt2:
    its greedy decoding loop stops when every row has ended, a data-dependent loop that
    torch.export does not take, so it stays in model.pt (Captioner.decode)."""
    import captioner as cap
    from PIL import Image

    class Encoder(nn.Module):
        def __init__(self, model):
            super().__init__()
            # Only the encoder's weights, so that the package carries no decoder weights.
            self.encoder, self.project = model.encoder, model.project

        def forward(self, images):
            return cap.Captioner.encode(self, images)

    model = scripted_weights(cap.Captioner(len(cap.ITOS)), d)
    names = sorted(f for f in os.listdir(os.path.join(d, "heldout")) if f.endswith(".png"))[:64]
    x = cap.normalize(np.stack([np.asarray(Image.open(os.path.join(d, "heldout", n)).convert("RGB"))
                                for n in names]))
    return Model(Encoder(model).eval(), 64, ["input__0"], [rows(x, 64)], stem="encoder")


# The batch max is at least the model config's batch_size (models/configs/<name>.toml).
MODELS = {"digits": digits, "resnet18": resnet18, "efficientnet_lite0": efficientnet_lite0,
          "textcls": textcls, "minilm": minilm, "captioner": captioner}


class Float32(nn.Module):
    """A submodule kept in float32 inside an autocast model: autocast off, its input cast to
    float32 and its output back to the input's dtype (other arguments, such as a block's
    drop-connect rate, pass as they are), as torchd runs TorchScript's float32 modules."""

    def __init__(self, module):
        super().__init__()
        self.module = module

    def forward(self, x, *args, **kwargs):
        with torch.autocast(x.device.type, enabled=False):
            return self.module(x.float(), *args, **kwargs).to(x.dtype)


class Cast(nn.Module):
    """The module under autocast to dtype, as torchd runs TorchScript in bf16: matrix products
    and convolutions in dtype, the ops autocast keeps in float32 in float32, and the weights
    kept float32 and cast as they are used. Converting the weights and every activation to bfloat16 instead costs far more
    accuracy (docs/guide/pt2.md, Precision). The submodules named in fp32_modules stay
    float32; it takes and returns float32."""

    def __init__(self, module, dtype, fp32_modules=()):
        super().__init__()
        self.module, self.dtype = module, dtype
        for name in fp32_modules:
            parent, _, leaf = name.rpartition(".")
            # setattr replaces a ModuleList's item too: its items are attributes named "0", "1", ...
            setattr(self.module.get_submodule(parent), leaf, Float32(self.module.get_submodule(name)))

    # Positional arguments, not *args, so that the exported signature is the module's: an
    # image (float) or token ids and their attention mask (int64).
    def forward(self, x, mask=None):
        with torch.autocast(x.device.type, dtype=self.dtype):
            y = self.module(x) if mask is None else self.module(x, mask)
        return y.float()


def fp32_modules(name):
    """The submodules that stay float32 in a bf16 or fp16 export: the fp32_modules of the
    model's archive config (models/configs/NAME.toml), which torchd keeps in float32 when it
    serves the TorchScript model.pt in bf16, so that both formats have one recipe."""
    import tomllib
    path = os.path.join(HERE, "configs", name + ".toml")
    if not os.path.exists(path):
        return []
    with open(path, "rb") as f:
        return list(tomllib.load(f).get("fp32_modules", []))


def file_hash(h, path):
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)


def package_name(device, dtype, stem="model"):
    return stem + ("" if device == "cpu" else "_" + device) + ("" if dtype == "fp32" else "_" + dtype) + ".pt2"


def batch_rows(m, n):
    """The inputs of batch n: the first n rows, a text batch trimmed to its longest."""
    xs = [x[:n] for x in m.rows]
    if m.seq_max is not None:
        width = int(xs[1].sum(axis=1).max())
        xs = [x[:, :width] for x in xs]
    return [torch.from_numpy(np.ascontiguousarray(x)) for x in xs]


def spec(name, t, lo, hi):
    return {"name": name, "dtype": str(t.dtype).removeprefix("torch."),
            "shape": [-1 if a != b else a for a, b in zip(lo, hi)], "min": lo, "max": hi}


def compile_package(m, device, dtype, path, fp32=()):
    import torch._inductor.config as inductor_config
    module = m.module if dtype == "fp32" else Cast(m.module, DTYPES[dtype], fp32)
    module = module.to(device).eval()
    batch = torch.export.Dim("batch", min=1, max=m.batch_max)
    # Export on a batch of 2 and, for text, a padded length of at least 2 (torch.export
    # specializes dimensions of size 0 and 1).
    example = [x.to(device) for x in batch_rows(m, 2)]
    dims = {0: batch}
    if m.seq_max is not None:
        seq = torch.export.Dim("seq", min=1, max=m.seq_max)
        dims = {0: batch, 1: seq}
        if example[0].shape[1] < 2:
            example = [torch.cat([x, torch.zeros_like(x[:, :1])], 1) for x in example]
    dynamic = tuple(dict(dims) for _ in example)
    ep = torch.export.export(module, tuple(example), dynamic_shapes=dynamic)
    with torch.no_grad():
        out = module(*example)
    specs = []
    for name, x in zip(m.inputs, example):
        lo, hi = list(x.shape), list(x.shape)
        lo[0], hi[0] = 1, m.batch_max
        if m.seq_max is not None:
            lo[1], hi[1] = 1, m.seq_max
        specs.append(spec(name, x, lo, hi))
    outputs = [{"name": "output__0", "dtype": str(out.dtype).removeprefix("torch."),
                "shape": [-1] + list(out.shape[1:])}]
    metadata = {"torchd.inputs": json.dumps(specs), "torchd.outputs": json.dumps(outputs),
                "torchd.precision": dtype}
    if dtype != "fp32" and fp32:
        metadata["torchd.fp32_modules"] = json.dumps(list(fp32))
    configs = {"aot_inductor.metadata": metadata}
    if device == "cpu":
        # Older torch has no cpp.march: there the package is compiled for this machine.
        if hasattr(inductor_config.cpp, "march"):
            configs["cpp.march"] = MARCH
            metadata["torchd.march"] = MARCH
        configs["cpp.simdlen"] = SIMDLEN
        # Frozen, the weights are constants: Inductor folds the batch norms into the
        # convolutions and prepacks the weights in oneDNN's blocked layouts once, at compile
        # time, instead of reordering them at every forward (ResNet-18's batch-1 forward
        # 1.4-1.5x faster). Its freezing passes run only without autograd.
        configs["freezing"] = True
    with torch.no_grad():
        torch._inductor.aoti_compile_and_package(ep, package_path=path, inductor_configs=configs)


def one_relu_per_call(module):
    """Give each torchvision BasicBlock a ReLU module of its own for the ReLU after the residual
    add: the block calls its one self.relu twice, torch.export records both calls as one
    source partition with two outputs, and the x86 quantizer's conv+add+ReLU pattern refuses
    that ("Input partition has more than one output node"). Same weights, same function."""
    import types
    from torchvision.models.resnet import BasicBlock

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
        out += identity
        return self.relu_out(out)

    for block in module.modules():
        if isinstance(block, BasicBlock):
            block.relu_out = nn.ReLU(inplace=True)
            block.forward = types.MethodType(forward, block)
    return module


def plain_efficientnet(model):
    """EfficientNet-Lite's modules as the x86 quantizer recognizes them, same weights and same
    function: it finds convolutions by their module type (nn.Conv2d), so each of the package's
    Conv2dStaticSamePadding becomes an nn.Conv2d (its TensorFlow "same" padding in the conv
    where it is symmetric, a ZeroPad2d before it where not); and each block calls one ReLU6
    module two or three times, one source partition the conv+ReLU6 pattern refuses, as
    one_relu_per_call's, so each call gets its own ReLU6. Lite0 has no squeeze-excitation."""
    import types
    from efficientnet_lite_pytorch.utils import Conv2dStaticSamePadding

    def plain(c):
        conv = nn.Conv2d(c.in_channels, c.out_channels, c.kernel_size, c.stride, groups=c.groups,
                         bias=c.bias is not None)
        conv.load_state_dict(c.state_dict())
        left, right, top, bottom = getattr(c.static_padding, "padding", (0, 0, 0, 0))
        if left == right and top == bottom:
            conv.padding = (top, left)
            return conv
        return nn.Sequential(nn.ZeroPad2d((left, right, top, bottom)), conv)

    for name, c in list(model.named_modules()):
        if isinstance(c, Conv2dStaticSamePadding):
            parent, _, leaf = name.rpartition(".")
            setattr(model.get_submodule(parent), leaf, plain(c))

    def block(self, inputs, drop_connect_rate=None):  # drop connect is training's only
        x = inputs
        if self._block_args.expand_ratio != 1:
            x = self._relu6_expand(self._bn0(self._expand_conv(x)))
        x = self._bn2(self._project_conv(self._relu6_depthwise(self._bn1(self._depthwise_conv(x)))))
        a = self._block_args
        if self.id_skip and a.stride == 1 and a.input_filters == a.output_filters:
            x = x + inputs
        return x

    def features(self, inputs):
        x = self._relu6_stem(self._bn0(self._conv_stem(inputs)))
        for b in self._blocks:
            x = b(x)
        return self._relu6_head(self._bn1(self._conv_head(x)))

    for b in model._blocks:
        if b.has_se:
            sys.exit("pt2: plain_efficientnet has no squeeze-excitation")
        b._relu6_expand, b._relu6_depthwise = nn.ReLU6(), nn.ReLU6()
        b.forward = types.MethodType(block, b)
    model._relu6_stem, model._relu6_head = nn.ReLU6(), nn.ReLU6()
    model.extract_features = types.MethodType(features, model)
    return model


def calibration(mean, std):
    """The int8 calibration batch of a CNN normalized with mean and std: the gate images'
    photographs 0..CALIB_PHOTOS-1; the other photographs and every mirror image are the gate's
    held out."""
    mean = np.array(mean, np.float32).reshape(1, 3, 1, 1)
    std = np.array(std, np.float32).reshape(1, 3, 1, 1)
    photos = gate_images()[:CALIB_PHOTOS].astype(np.float32) / 255
    return torch.from_numpy(np.ascontiguousarray((photos - mean) / std))


class Int8Recipe:
    """How a model is quantized: rewrite makes its module quantizable (same weights, same
    function), mean and std are its input normalization (for the calibration batch), and
    fp32_modules are the submodules left unquantized."""

    def __init__(self, rewrite, mean, std, fp32_modules=()):
        self.rewrite, self.mean, self.std, self.fp32_modules = rewrite, mean, std, list(fp32_modules)


# The models with an int8 export. EfficientNet-Lite's normalization is TensorFlow's
# (pixel - 127) / 128 (models/efficientnet.py). Quantized whole, it agrees with float32's top-1
# on 96.5% of the gate's images; its stem and first two blocks (the largest errors, one at a
# time; 12% of its multiply-adds) in float32 make that 99.0% (docs/design/engine.md), where
# oneDNN has VNNI or AMX-INT8.
INT8 = {
    "resnet18": Int8Recipe(one_relu_per_call, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
    "efficientnet_lite0": Int8Recipe(plain_efficientnet, [127 / 255] * 3, [128 / 255] * 3,
                                     ["_conv_stem", "_blocks.0", "_blocks.1"]),
}
CALIB_PHOTOS = 50


def compile_int8(m, name, path):
    """The CPU package of m statically quantized to int8 with PyTorch's PT2E flow (torchao's,
    which replaces torch.ao's in torch 2.15) and the x86 Inductor quantizer's defaults: int8
    activations (per tensor, from calibration) and weights (per channel). Compiled frozen and
    without autograd, Inductor's freezing passes prepack the weights and lower the
    quantize/dequantize pairs to oneDNN's quantized convolutions and linear layers (VNNI,
    AMX-INT8); with autograd on, they are skipped and every forward dequantizes the weights
    and runs float32 convolutions. Inputs and outputs stay float32."""
    try:
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
        # Importing it also registers its Inductor passes.
        import torchao.quantization.pt2e.quantizer.x86_inductor_quantizer as xiq
    except ImportError:
        sys.exit("pt2: --dtype int8 needs torchao; make models-int8 installs it")
    recipe = INT8[name]
    module = recipe.rewrite(m.module).eval()
    dynamic = ({0: torch.export.Dim("batch", min=1, max=m.batch_max)},)
    example = tuple(batch_rows(m, 2))
    quantizer = xiq.X86InductorQuantizer()
    quantizer.set_global(xiq.get_default_x86_inductor_quantization_config())
    for fp32 in recipe.fp32_modules:
        quantizer.set_module_name_qconfig(fp32, None)
    prepared = prepare_pt2e(torch.export.export(module, example, dynamic_shapes=dynamic).module(), quantizer)
    calib = calibration(recipe.mean, recipe.std)
    with torch.no_grad():
        for i in range(0, len(calib), 10):
            prepared(calib[i:i + 10])
    quantized = convert_pt2e(prepared)
    ep = torch.export.export(quantized, example, dynamic_shapes=dynamic)
    lo, hi = list(example[0].shape), list(example[0].shape)
    lo[0], hi[0] = 1, m.batch_max
    with torch.no_grad():
        out = module(*example)
    metadata = {"torchd.inputs": json.dumps([spec(m.inputs[0], example[0], lo, hi)]),
                "torchd.outputs": json.dumps([{"name": "output__0", "dtype": "float32", "shape": [-1] + list(out.shape[1:])}]),
                "torchd.precision": "int8", "torchd.march": MARCH}
    configs = {"aot_inductor.metadata": metadata, "freezing": True, "cpp.march": MARCH, "cpp.simdlen": SIMDLEN}
    with torch.no_grad():
        torch._inductor.aoti_compile_and_package(ep, package_path=path, inductor_configs=configs)


# Packages kept per model, device and dtype: enough for main and a few clones of other
# revisions on one machine, while the cache stays bounded as the recipes change.
CACHE_KEEP = 4


def prune_cache(cache, prefix):
    """Delete all but the CACHE_KEEP most recently used packages whose names start with prefix."""
    entries = [os.path.join(cache, f) for f in os.listdir(cache)
               if f.startswith(prefix) and f.endswith(".pt2") and len(f) == len(prefix) + 24 + 4]
    entries.sort(key=os.path.getmtime, reverse=True)
    for old in entries[CACHE_KEEP:]:
        os.remove(old)


def build(out, cache, name, device, dtype):
    d = os.path.join(out, name)
    m = MODELS[name](d)
    weights = os.path.join(d, m.weights)
    if not os.path.exists(weights):
        sys.exit(f"pt2: {weights} is missing; build the zoo first (models/build_all.py)")
    # The key covers what the package is made from: the code that builds the module and
    # compiles it, the weights, the torch version and the settings (not the references).
    h = hashlib.sha256()
    if dtype == "int8" and (device != "cpu" or name not in INT8):
        sys.exit(f"pt2: --dtype int8 is for the CPU and {', '.join(INT8)}")
    fp32 = fp32_modules(name) if dtype not in ("fp32", "int8") else []
    for fn in (MODELS[name], Float32, Cast, batch_rows, compile_package):
        h.update(inspect.getsource(fn).encode())
    if dtype == "int8":
        import torchao
        recipe = INT8[name]
        for fn in (recipe.rewrite, calibration, gate_images, compile_int8):
            h.update(inspect.getsource(fn).encode())
        h.update(f"torchao {torchao.__version__} {CALIB_PHOTOS} {recipe.mean} {recipe.std} {recipe.fp32_modules}".encode())
    file_hash(h, weights)
    h.update(f"{torch.__version__} {device} {dtype} {MARCH} {SIMDLEN} {m.batch_max} {m.seq_max} {fp32}".encode())
    file = package_name(device, dtype, m.stem)
    stem = file.removesuffix(".pt2")
    cached = os.path.join(cache, f"{name}-{stem}-{h.hexdigest()[:24]}.pt2")
    if os.path.exists(cached):
        os.utime(cached)  # marks it used, for prune_cache
        print(f"pt2 {name} {device} {dtype}: cached {cached}", flush=True)
    else:
        t = time.monotonic()
        # The package's folder inside the zip is named after the file: compile to NAME.pt2.
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            partial = os.path.join(tmp, f"{name}.pt2")
            if dtype == "int8":
                compile_int8(m, name, partial)
            else:
                compile_package(m, device, dtype, partial, fp32)
            os.replace(partial, cached)
        print(f"pt2 {name} {device} {dtype}: compiled in {time.monotonic() - t:.1f} s", flush=True)
        prune_cache(cache, f"{name}-{stem}-")
    shutil.copyfile(cached, os.path.join(d, file))
    if device != "cpu" or dtype != "fp32":
        return

    if name == "efficientnet_lite0":
        np.save(os.path.join(d, "bf16_gate_images.npy"), gate_images())
    if m.seq_max is None:
        np.save(os.path.join(d, "pt2_ref_input.npy"), m.rows[0])
    else:
        np.save(os.path.join(d, "pt2_ref_input_ids.npy"), m.rows[0])
        np.save(os.path.join(d, "pt2_ref_attention_mask.npy"), m.rows[1])
    for n in REF_BATCHES + (m.batch_max,):
        xs = batch_rows(m, n)
        with torch.inference_mode():
            y = m.module(*xs)
        np.save(os.path.join(d, f"pt2_ref_output_b{n}.npy"), y.numpy())
        if name == "minilm":
            # The text_embedding handler's pooling (modules.json): the mean over the mask's
            # tokens, then L2 normalization.
            mask = xs[1].unsqueeze(-1).to(y.dtype)
            pooled = (y * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
            np.save(os.path.join(d, f"pt2_ref_pooled_b{n}.npy"), pooled.numpy())


def gate_images():
    """The bf16 accuracy gate's images, as uint8 [200, 3, 224, 224] after Resize(256) and
    CenterCrop(224): the 100 photographs of PyPI's ai-benchmark
    (its classification set, each of a different ImageNet class), then their mirror images."""
    import importlib.util
    import efficientnet
    from PIL import Image
    spec = importlib.util.find_spec("ai_benchmark")  # its data only; importing it needs TensorFlow
    if spec is None:
        sys.exit("pt2: the ai-benchmark package is missing; make venv installs it (models/requirements.txt)")
    d = os.path.join(list(spec.submodule_search_locations)[0], "data", "classification")
    photos = [Image.open(os.path.join(d, f"{i}.jpg")).convert("RGB") for i in range(100)]
    photos += [p.transpose(Image.Transpose.FLIP_LEFT_RIGHT) for p in photos]
    out = np.empty((len(photos), 3, efficientnet.CROP, efficientnet.CROP), dtype=np.uint8)
    for i, img in enumerate(photos):
        img = img.resize(efficientnet.resized_size(*img.size), Image.Resampling.BILINEAR)
        left, top = (img.width - efficientnet.CROP) // 2, (img.height - efficientnet.CROP) // 2
        out[i] = np.asarray(img.crop((left, top, left + efficientnet.CROP, top + efficientnet.CROP))).transpose(2, 0, 1)
    return out


def main():
    def flags(p):
        p.add_argument("--models", default=",".join(MODELS), help="comma-separated zoo names")
        cache = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "torchd", "pt2")
        p.add_argument("--cache", default=cache,
                       help="compiled packages, by input hash")
        p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
        p.add_argument("--dtype", default="fp32", choices=list(DTYPES),
                       help="the dtype the package computes in (autocast; int8: statically quantized, "
                            "resnet18 and efficientnet_lite0 on the CPU); inputs and outputs stay float32")
    # The packages are compiled for this CPU's ISA (AOTI_CPU_ISA), as torchd serves them.
    args = common.parse_args(__doc__.splitlines()[0], flags, pin_kernels=False)
    if args.device != "cpu":
        # No references are made there, and CUDA's matrix products refuse deterministic mode
        # unless CUBLAS_WORKSPACE_CONFIG is set.
        torch.use_deterministic_algorithms(False)
    os.makedirs(args.cache, exist_ok=True)
    for name in args.models.split(","):
        if name not in MODELS:
            sys.exit(f"pt2: unknown model {name!r}; the zoo's packages are {', '.join(MODELS)}")
        build(args.out, args.cache, name, args.device, args.dtype)


if __name__ == "__main__":
    main()
