import torch, time, statistics, sys
torch.set_num_threads(2)
lin = torch.nn.Linear(512, 512)
x = torch.randn(64, 512)
enc = torch.nn.TransformerEncoderLayer(128, 4, 256, batch_first=True).eval()
s = torch.randn(32, 32, 128)
def bench(f, n):
    ts=[]
    for _ in range(n):
        t=time.perf_counter(); f(); ts.append(time.perf_counter()-t)
    return statistics.median(ts)*1e3
with torch.inference_mode():
    for _ in range(5): lin(x); enc(s)
    print(sys.argv[1], "linear64x512x512 ms %.3f" % bench(lambda: lin(x), 200), "transformer-layer ms %.3f" % bench(lambda: enc(s), 50))
