# Makes the GPU check's models with the GPU machine's torch: resnet50 fp16 (TorchScript traced on
# cuda), resnet18 fp32 (TorchScript, and an AOTInductor package compiled for cuda with batch
# 1..32 and torchd's input specs), and reference inputs/outputs from eager PyTorch on the GPU.
import os, sys, time, json
import numpy as np
import torch, torchvision
from torch.export import Dim

out = sys.argv[1]
what = sys.argv[2:] or ["r50", "r18", "pt2"]
os.makedirs(out, exist_ok=True)
dev = os.environ.get("GPUCHECK_DEV", "cuda")
torch.manual_seed(0)
sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
print("torch", torch.__version__, dev, flush=True)


class Half(torch.nn.Module):
    """fp32 in and out, fp16 inside: clients send FP32 tensors."""

    def __init__(self, m):
        super().__init__()
        self.m = m.half()

    def forward(self, x):
        return self.m(x.half()).float()


def save_ref(name, model, sizes):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(max(sizes), 3, 224, 224, generator=g)
    np.save(f"{out}/{name}_x.npy", x.numpy())
    with torch.no_grad():
        y = torch.cat([model(x[i : i + 1].to(dev)).float().cpu() for i in range(x.shape[0])])
    np.save(f"{out}/{name}_y.npy", y.numpy())


if "r50" in what:
    t = time.time()
    m = Half(torchvision.models.resnet50()).eval().to(dev)
    with torch.no_grad():
        ts = torch.jit.trace(m, torch.randn(8, 3, 224, 224, device=dev))
    ts.save(f"{out}/resnet50_fp16.pt")
    save_ref("resnet50_fp16", m, [8])
    print(f"resnet50_fp16 traced in {time.time()-t:.1f}s", flush=True)
    # The ceiling: the traced module's own batched forward in this process.
    for bs in ((1, 64, 128) if dev == "cuda" else ()):
        xb = torch.randn(bs, 3, 224, 224, device=dev)
        with torch.no_grad():
            for _ in range(5):
                ts(xb)
            sync()
            t = time.time()
            for _ in range(20):
                ts(xb)
            sync()
        dt = (time.time() - t) / 20
        print(f"in-process resnet50_fp16 batch {bs}: {dt*1e3:.2f} ms per forward, {bs/dt:.0f} inf/s", flush=True)

if "r18" in what or "pt2" in what:
    torch.manual_seed(0)  # the same weights in every process that makes them
    m = torchvision.models.resnet18().eval().to(dev)
    if "r18" in what:
        with torch.no_grad():
            ts = torch.jit.trace(m, torch.randn(2, 3, 224, 224, device=dev))
        ts.save(f"{out}/resnet18.pt")
    save_ref("resnet18", m, [32])
    if "pt2" in what:
        t = time.time()
        ep = torch.export.export(m, (torch.randn(2, 3, 224, 224, device=dev),),
                                 dynamic_shapes=({0: Dim("batch", min=1, max=32)},))
        spec = [{"name": "input__0", "dtype": "float32", "shape": [-1, 3, 224, 224],
                 "min": [1, 3, 224, 224], "max": [32, 3, 224, 224]}]
        outs = [{"name": "output__0", "dtype": "float32", "shape": [-1, 1000]}]
        md = {"torchd.inputs": json.dumps(spec), "torchd.outputs": json.dumps(outs)}
        torch._inductor.aoti_compile_and_package(ep, package_path=f"{out}/resnet18_cuda.pt2",
                                                 inductor_configs={"aot_inductor.metadata": md})
        print(f"resnet18 cuda .pt2 compiled in {time.time()-t:.1f}s", flush=True)
print("export done", flush=True)
