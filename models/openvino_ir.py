"""The zoo's resnet18 and EfficientNet-Lite0 as OpenVINO IR (model.xml + model.bin), in a Triton
model repository that torchd's openvino backend serves (backends/openvino):

  OUT/openvino/resnet18_ov/config.pbtxt       backend "openvino", max_batch_size 32
  OUT/openvino/resnet18_ov/1/model.{xml,bin}  fp32: ov.convert_model of the eager module with
                                               the zoo's weights (resnet18/model.pt), batch -1
  OUT/openvino/resnet18_ov_int8/...            int8: that model quantized by NNCF (8-bit
                                               post-training, calibrated on the 100 ai-benchmark
                                               photographs of efficientnet_lite0/bf16_gate_images.npy)
  OUT/openvino/efficientnet_lite0_ov/...       EfficientNet-Lite0 (the zoo's ImageNet weights,
                                               models/efficientnet.py), fp32 weights; its config
                                               asks OpenVINO's CPU plugin for bf16 inference
                                               (INFERENCE_PRECISION_HINT), which it computes where
                                               the CPU has avx512_bf16 or AMX and ignores (f32)
                                               elsewhere. No int8: NNCF's agreed with fp32 on 97.5%
                                               of the gate (bench/engine_spike.py), under its 99%.
  OUT/openvino/ref_input.npy                  8 of those images' mirrors (not calibrated on),
                                               ResNet's normalization, float32 [8, 3, 224, 224]
  OUT/openvino/ref_output_{fp32,int8}.npy     OpenVINO's Python runtime on the resnet18 IR and
                                               input (CPU, f32 precision hint), what the tests
                                               compare to
  OUT/openvino/efficientnet_lite0_ref_{input,output}.npy
                                               the same 8 images with the Lite models' (x-127)/128,
                                               and OpenVINO's Python runtime on the IR with its
                                               config's hint (bf16), what torchd serves
  OUT/openvino/gate.json                      each IR's top-1 agreement with the eager fp32 model
                                               on the 200 gate images, at the precision served

OpenVINO and NNCF come from build/pyext (the pinned wheels bench/forward.sh installs), beside
the zoo's venv: PYTHONPATH=build/pyext .venv/bin/python models/openvino_ir.py --out models/out
(make models-openvino).
"""
import os
import sys

import numpy as np
import torch

import common

MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 3, 1, 1)
# The Lite models' TensorFlow normalization, (pixel - 127) / 128 (models/efficientnet.py).
LITE_MEAN = np.full((1, 3, 1, 1), 127 / 255, np.float32)
LITE_STD = np.full((1, 3, 1, 1), 128 / 255, np.float32)
# The project's accuracy gate: top-1 agreement with eager fp32 on the 200 gate images.
GATE = 0.99

CONFIG = """name: "{name}"
backend: "openvino"
max_batch_size: 32
input [ {{ name: "x" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] }} ]
output [ {{ name: "logits" data_type: TYPE_FP32 dims: [ 1000 ] }} ]
dynamic_batching {{ }}
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{parameters}"""

PRECISION_PARAM = """parameters {{ key: "INFERENCE_PRECISION_HINT" value: {{ string_value: "{hint}" }} }}
"""


def convert(ov, module, example):
    model = ov.convert_model(module, example_input=torch.from_numpy(example),
                             input=[ov.PartialShape([-1, 3, 224, 224])])
    # The names the config and the clients use; the converter's are positional.
    model.inputs[0].get_tensor().set_names({"x"})
    model.outputs[0].get_tensor().set_names({"logits"})
    return model


def agreement(got, want):
    return float((got.argmax(1) == want.argmax(1)).mean())


def main():
    args = common.parse_args(__doc__.splitlines()[0], pin_kernels=False)
    try:
        import nncf
        import openvino as ov
    except ImportError as e:
        sys.exit(f"openvino_ir: {e}; put build/pyext on PYTHONPATH (make models-openvino)")
    import efficientnet
    import torchvision

    zoo = os.path.abspath(args.out)
    imgs = np.load(os.path.join(zoo, "efficientnet_lite0", "bf16_gate_images.npy")).astype(np.float32) / 255

    resnet = torchvision.models.resnet18(weights=None)
    resnet.load_state_dict(torch.jit.load(os.path.join(zoo, "resnet18", "model.pt")).state_dict())
    resnet.eval()
    x = np.ascontiguousarray((imgs - MEAN) / STD)
    calib, ref = x[:100], np.ascontiguousarray(x[100:108])
    model = convert(ov, resnet, calib[:2])
    int8 = nncf.quantize(model, nncf.Dataset([c[None] for c in calib]), subset_size=len(calib))

    lite = efficientnet.build_model()
    lx = np.ascontiguousarray((imgs - LITE_MEAN) / LITE_STD)
    lite_ref = np.ascontiguousarray(lx[100:108])
    lite_model = convert(ov, lite, lx[:2])

    # name: (model, the precision hint its config sets (None: torchd's f32), the eager module
    # and gate inputs, the reference input and the file of its answers)
    irs = {
        "resnet18_ov": (model, None, resnet, x, ref, "ref_output_fp32.npy"),
        "resnet18_ov_int8": (int8, None, resnet, x, ref, "ref_output_int8.npy"),
        "efficientnet_lite0_ov": (lite_model, "bf16", lite, lx, lite_ref, "efficientnet_lite0_ref_output.npy"),
    }
    core = ov.Core()
    gate = {}
    with common.model_dir(zoo, "openvino") as d:
        for name, (m, hint, module, gx, rx, ref_file) in irs.items():
            os.makedirs(os.path.join(d, name, "1"))
            # compress_to_fp16=False: the weights stay as trained (fp32), or as NNCF made them.
            xml = os.path.join(d, name, "1", "model.xml")
            ov.save_model(m, xml, compress_to_fp16=False)
            with torch.no_grad():
                want = np.concatenate([module(torch.from_numpy(gx[i:i + 20])).numpy() for i in range(0, len(gx), 20)])
            # The saved IR read back, as torchd reads it, with the hint torchd compiles it with;
            # a hint whose answers fail the gate on this CPU (bf16 on one that computes it) is
            # dropped, and the model is served in f32.
            for h in ([hint] if hint else []) + [None]:
                compiled = core.compile_model(core.read_model(xml), "CPU", {"INFERENCE_PRECISION_HINT": h or "f32"})
                got = np.concatenate([compiled(gx[i:i + 20])[0] for i in range(0, len(gx), 20)])
                g = {"hint": h or "f32", "precision": compiled.get_property("INFERENCE_PRECISION_HINT").to_string(),
                     "top1_agreement": agreement(got, want), "max_logit_diff": float(np.abs(got - want).max()),
                     "images": len(gx)}
                if g["top1_agreement"] >= GATE or h is None:
                    break
                print(f"openvino_ir: {name}: {h} agrees on {g['top1_agreement']:.3f} of the gate, under {GATE}: served in f32")
            gate[name] = g
            params = PRECISION_PARAM.format(hint=h) if h else ""
            with open(os.path.join(d, name, "config.pbtxt"), "w") as f:
                f.write(CONFIG.format(name=name, parameters=params))
            out = np.asarray(compiled(rx)[0], np.float32)
            np.save(os.path.join(d, ref_file), out)
            print(f"openvino_ir: {name}: {g['precision']}, top-1 agreement with eager fp32 {g['top1_agreement']:.3f}"
                  f" on {len(gx)} gate images; reference top-1 {out.argmax(1).tolist()}")
        np.save(os.path.join(d, "ref_input.npy"), ref)
        np.save(os.path.join(d, "efficientnet_lite0_ref_input.npy"), lite_ref)
        common.write_json(os.path.join(d, "gate.json"), gate)


if __name__ == "__main__":
    main()
