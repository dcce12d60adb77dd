"""PSS of two resnet18 batch-32 workers: started independently, or forked from one parent
that imported torch, torchvision and ts first.
Usage: PYTHON bench/handlerproc/forkshare.py spawn|fork."""
import os, re, subprocess, sys, time

def smaps(pid):
    s = open(f"/proc/{pid}/smaps_rollup").read()
    g = lambda k: int(re.search(r"^" + k + r":\s+(\d+)", s, re.M).group(1)) // 1024
    return g("Rss"), g("Pss")

WORK = """
import torch, torchvision
torch.manual_seed(0)
m = torchvision.models.resnet18(weights=None).eval()
with torch.inference_mode():
    for _ in range(3):
        m(torch.rand(32, 3, 224, 224))
"""

def child_body():
    exec(WORK, {})
    os.write(w, b"x")
    time.sleep(60)

mode = sys.argv[1]
kids = []
r, w = os.pipe()
if mode == "fork":
    import torch, torchvision, ts.model_service_worker  # noqa
    for _ in range(2):
        pid = os.fork()
        if pid == 0:
            child_body()
            os._exit(0)
        kids.append(pid)
else:
    for _ in range(2):
        p = subprocess.Popen([sys.executable, "-c", "import os, ts.model_service_worker\n" + WORK + "\nos.write(%d, b'x')\nimport time; time.sleep(60)" % w], pass_fds=(w,))
        kids.append(p.pid)
for _ in kids:
    os.read(r, 1)
tot_rss = tot_pss = 0
for pid in kids:
    a, b = smaps(pid); tot_rss += a; tot_pss += b
pa, pb = smaps(os.getpid())
print(f"{mode}: workers rss={tot_rss} pss={tot_pss} MiB; parent rss={pa} pss={pb} MiB; sum pss={tot_pss + pb} MiB")
for pid in kids:
    os.kill(pid, 9)
