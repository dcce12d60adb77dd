"""The zoo's resnet18 as OpenVINO IR (model.xml + model.bin), fp32 and int8, in a Triton
model repository that torchd's openvino backend serves (backends/openvino):

  OUT/openvino/resnet18_ov/config.pbtxt       backend "openvino", max_batch_size 32
  OUT/openvino/resnet18_ov/1/model.{xml,bin}  fp32: ov.convert_model of the eager module with
                                               the zoo's weights (resnet18/model.pt), batch -1
  OUT/openvino/resnet18_ov_int8/...            int8: that model quantized by NNCF (8-bit
                                               post-training, calibrated on the 100 ai-benchmark
                                               photographs of efficientnet_lite0/bf16_gate_images.npy)
  OUT/openvino/ref_input.npy                  8 of those images' mirrors (not calibrated on),
                                               normalized, float32 [8, 3, 224, 224]
  OUT/openvino/ref_output_{fp32,int8}.npy     OpenVINO's Python runtime on the same IR and input
                                               (CPU, f32 precision hint), what the tests compare to

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

CONFIG = """name: "{name}"
backend: "openvino"
max_batch_size: 32
input [ {{ name: "x" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] }} ]
output [ {{ name: "logits" data_type: TYPE_FP32 dims: [ 1000 ] }} ]
dynamic_batching {{ }}
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""


def main():
    args = common.parse_args(__doc__.splitlines()[0], pin_kernels=False)
    try:
        import nncf
        import openvino as ov
    except ImportError as e:
        sys.exit(f"openvino_ir: {e}; put build/pyext on PYTHONPATH (make models-openvino)")
    import torchvision

    zoo = os.path.abspath(args.out)
    module = torchvision.models.resnet18(weights=None)
    module.load_state_dict(torch.jit.load(os.path.join(zoo, "resnet18", "model.pt")).state_dict())
    module.eval()
    imgs = np.load(os.path.join(zoo, "efficientnet_lite0", "bf16_gate_images.npy"))
    x = np.ascontiguousarray((imgs.astype(np.float32) / 255 - MEAN) / STD)
    calib, ref = x[:100], np.ascontiguousarray(x[100:108])

    model = ov.convert_model(module, example_input=torch.from_numpy(calib[:2]),
                             input=[ov.PartialShape([-1, 3, 224, 224])])
    # The names the config and the clients use; the converter's are positional.
    model.inputs[0].get_tensor().set_names({"x"})
    model.outputs[0].get_tensor().set_names({"logits"})
    int8 = nncf.quantize(model, nncf.Dataset([c[None] for c in calib]), subset_size=len(calib))

    core = ov.Core()
    with common.model_dir(zoo, "openvino") as d:
        for name, m in (("resnet18_ov", model), ("resnet18_ov_int8", int8)):
            os.makedirs(os.path.join(d, name, "1"))
            # compress_to_fp16=False: the weights stay as trained (fp32), or as NNCF made them.
            ov.save_model(m, os.path.join(d, name, "1", "model.xml"), compress_to_fp16=False)
            with open(os.path.join(d, name, "config.pbtxt"), "w") as f:
                f.write(CONFIG.format(name=name))
            # The reference is the saved IR read back, as torchd reads it.
            saved = core.read_model(os.path.join(d, name, "1", "model.xml"))
            compiled = core.compile_model(saved, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
            out = compiled(ref)[0]
            kind = "int8" if name.endswith("int8") else "fp32"
            np.save(os.path.join(d, f"ref_output_{kind}.npy"), np.asarray(out, np.float32))
            print(f"openvino_ir: {name}: top-1 of the reference images {out.argmax(1).tolist()}")
        np.save(os.path.join(d, "ref_input.npy"), ref)


if __name__ == "__main__":
    main()
