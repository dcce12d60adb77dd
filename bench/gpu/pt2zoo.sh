#!/bin/bash
# The zoo's own export for CUDA, on a machine with an NVIDIA GPU and a CUDA PyTorch (python3),
# run from the repository root with build/gpucheck beside it (bench/gpu/bundle.sh, which also
# copies the digits model there): models/pt2.py --device cuda compiles the digits CNN with
# that machine's torch (fp32 and fp16), torchd archives and serves each package on cuda:0,
# and bench/gpu/check.py compares its answers at batch 1, 2, 7 and 64 with eager PyTorch's
# on that machine's CPU. DTYPES="fp16" (default "fp32 fp16") makes and checks only those.
# Output: PASS/FAIL lines on stdout.
set -u
G=build/gpucheck
W=${WORK:-/tmp/pt2zoo}; rm -rf "$W"; mkdir -p "$W/out" "$W/store"
cp -r "$G/zoo/digits" "$W/out/digits"
T=$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))')
export LD_LIBRARY_PATH=$T/lib:$G/lib
DTYPES=${DTYPES:-fp32 fp16}
for dtype in $DTYPES; do
  timeout 300 python3 models/pt2.py --out "$W/out" --models digits --device cuda --dtype $dtype --cache "$W/cache" 2>&1 |
    grep -v -i warn || echo "models/pt2.py --device cuda --dtype $dtype: FAIL"
done
ls -l "$W/out/digits/"*.pt2
echo "== $(date -u +%T) references, archives, serve"
# The reference: eager PyTorch on this machine's CPU, from the same TorchScript weights.
python3 - "$W/out/digits" <<'PY'
import sys, numpy as np, torch
d = sys.argv[1]
x = np.ascontiguousarray(np.load(f"{d}/heldout.npy")[:64], dtype=np.float32)
with torch.no_grad():
    y = torch.jit.load(f"{d}/model.pt").eval()(torch.from_numpy(x)).numpy()
np.save(f"{d}/ref_x.npy", x)
np.save(f"{d}/ref_y.npy", y)
PY
pkgs=; models=
for dtype in $DTYPES; do
  p=model_cuda; [ "$dtype" = fp32 ] || p=model_cuda_$dtype
  pkgs="$pkgs $p"; models="$models${models:+,}digits_$p=digits_$p.mar"
done
# An fp16 package is served with precision = "fp16", a key placed before the config's tables.
{ echo 'precision = "fp16"'; cat models/configs/digits_tensor.toml; } > "$W/digits_fp16.toml"
for p in $pkgs; do
  cfg=models/configs/digits_tensor.toml; [ "$p" = model_cuda_fp16 ] && cfg=$W/digits_fp16.toml
  $G/bin/torchd archive --model-name "digits_$p" --version 1.0 --serialized-file "$W/out/digits/$p.pt2" \
    --config-file "$cfg" --export-path "$W/store" --archive-format zip-store --force >/dev/null ||
    echo "archive $p: FAIL"
done
TORCHD_DEVICE=cuda:0 $G/bin/torchd serve --access-log=false --model-store "$W/store" \
  --models "$models" \
  --inference-address 127.0.0.1:18280 --management-address 127.0.0.1:18281 --metrics-address 127.0.0.1:18282 \
  --grpc-address= --grpc-inference-address= --grpc-management-address= > "$W/serve.log" 2>&1 &
spid=$!
up=
for _ in $(seq 1 120); do curl -sf 127.0.0.1:18280/ping >/dev/null && { up=1; break; }; sleep 0.5; done
[ -n "$up" ] || { echo "FAIL: the server did not answer /ping"; tail -20 "$W/serve.log"; kill -9 $spid; exit 1; }
grep -E "registered|ERROR|error" "$W/serve.log" | head -5
case " $pkgs " in *" model_cuda "*)
  python3 "$G/check.py" http://127.0.0.1:18280 digits_model_cuda "$W/out/digits/ref" 5e-3 1,2,7,64 65;; esac
case " $pkgs " in *" model_cuda_fp16 "*)
  python3 "$G/check.py" http://127.0.0.1:18280 digits_model_cuda_fp16 "$W/out/digits/ref" 5e-2 1,2,7,64;; esac
kill -INT $spid; wait $spid
