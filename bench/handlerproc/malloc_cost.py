"""Seconds per forward of resnet18 (eval, inference_mode) at a batch size, after warm-up: the
cost of a fixed mmap threshold (page faults per batch) against glibc's dynamic one.
Usage: PYTHON bench/handlerproc/malloc_cost.py BATCH N, with and without MALLOC_MMAP_THRESHOLD_."""
import resource, sys, time, torch, torchvision, re
bs, n = int(sys.argv[1]), int(sys.argv[2])
torch.manual_seed(0)
m = torchvision.models.resnet18(weights=None).eval()
x = torch.rand(bs, 3, 224, 224)
with torch.inference_mode():
    m(x); m(x)
    u0 = resource.getrusage(resource.RUSAGE_SELF)
    t = time.perf_counter()
    for _ in range(n):
        m(x)
    dt = (time.perf_counter() - t) / n
    u1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (u1.ru_utime + u1.ru_stime - u0.ru_utime - u0.ru_stime) / n
    sys_ = (u1.ru_stime - u0.ru_stime) / n
    flt = (u1.ru_minflt - u0.ru_minflt) // n
s = open("/proc/self/smaps_rollup").read()
rss = int(re.search(r"^Rss:\s+(\d+)", s, re.M).group(1)) // 1024
print(f"bs={bs} wall_s={dt:.3f} cpu_s={cpu:.3f} sys_s={sys_:.3f} minflt={flt} rss_mib={rss}")
