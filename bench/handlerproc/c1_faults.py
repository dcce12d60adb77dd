"""One resnet18 request at a time as bench/handlerproc.sh's handler runs it (preprocess a JPEG,
forward, top-5), after batch-32 forwards as the benchmark's c=50 warm-up leaves a worker:
prints the wall and CPU milliseconds per request, the minor page faults per request, and the
RSS after. Run under the malloc settings to compare, e.g.
  MALLOC_MMAP_THRESHOLD_=4194304 TAG=4m .venv/bin/python bench/handlerproc/c1_faults.py models/out/resnet18/sample_640x480.jpg
Page faults are a count, not a time: they compare on a loaded machine."""
import io, os, resource, sys, time
import torch, torchvision
from PIL import Image
from torchvision import transforms
P = transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224), transforms.ToTensor(),
    transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])])
m = torchvision.models.resnet18(weights=None).eval()
img = open(sys.argv[1], "rb").read()


def one(n):
    x = torch.stack([P(Image.open(io.BytesIO(img)).convert("RGB")) for _ in range(n)])
    with torch.inference_mode():
        y = m(x)
    return torch.topk(torch.softmax(y, 1), 5, 1)[0].tolist()
for _ in range(3):
    one(32)  # as the benchmark's c=50 warm-up leaves it
for _ in range(5):
    one(1)
N = 40
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
t0 = time.perf_counter(); c0 = time.process_time()
for _ in range(N):
    one(1)
t = (time.perf_counter() - t0) / N * 1e3; c = (time.process_time() - c0) / N * 1e3
f = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / N
print(f"{os.environ.get('TAG')}: wall {t:.1f} ms cpu {c:.1f} ms minflt/req {f:.0f}")
rss = lambda: int(open("/proc/self/statm").read().split()[1]) * 4096 >> 20
print(f"  rss after c=1 {rss()} MiB", end="")
for _ in range(3):
    one(32)
print(f", after batch 32 {rss()} MiB")
