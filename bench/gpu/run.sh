#!/bin/bash
# The GPU check, run on a machine with an NVIDIA GPU and a CUDA PyTorch (python3), from the
# folder bench/gpu/bundle.sh made (build/gpucheck, carried there as it is):
#   1. torchd loads its C ABI built against that machine's LibTorch and sees the GPU;
#   2. TorchScript resnet18 (fp32) and an AOTInductor package of it compiled there for CUDA
#      (batch 1..32) answer through KServe v2 as eager PyTorch on the same GPU, at batch sizes
#      1, 2, 7 and 32; a 33-row request to the package is refused;
#   3. perf_analyzer over HTTP: resnet50 fp16 at c=1 and c=128 (WORKERS workers), and resnet18
#      TorchScript against its package at c=1 and c=32, beside the in-process forward.
# Output goes to $OUT (log.txt, cpu.pprof of the resnet50 run). Nothing is asserted by exit
# code beyond the steps running; the log holds PASS/FAIL lines and the figures.
set -u
G=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-/tmp/gpuout}; mkdir -p "$O"
exec > >(tee "$O/log.txt") 2>&1
W=${WORK:-/tmp/gpucheck-work}; rm -rf "$W"; mkdir -p "$W/store"
T=$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))')
export LD_LIBRARY_PATH=$T/lib:$G/lib
B=$G/bin
PA="timeout 100 $G/perf_analyzer -u localhost:8080 -i http --measurement-interval 4000 --max-trials 6 -s 30"
echo "== $(date -u +%T) device"; nvidia-smi -L; nproc
$B/torchd version || exit 1

echo "== $(date -u +%T) export: the CUDA package compiles in the background"
timeout 400 python3 "$G/export.py" "$W" pt2 > "$W/pt2.log" 2>&1 &
pt2pid=$!
python3 "$G/export.py" "$W" r50 r18 2>&1 | grep -v -i warn
for m in resnet50_fp16:resnet50_fp16.pt resnet18:resnet18.pt; do
  $B/torchd archive --model-name ${m%%:*} --version 1.0 --serialized-file "$W/${m##*:}" \
    --config-file "$G/${m%%:*}.toml" --export-path "$W/store" --archive-format zip-store --force >/dev/null || exit 1
done

echo "== $(date -u +%T) serve on cuda:0 with WORKERS=${WORKERS:-4}"
TORCHD_PROFILE=cpu TORCHD_PROFILE_PATH=$O TORCHD_MAX_REQUEST_SIZE=67108864 TORCHD_DEVICE=cuda:0 WORKERS=${WORKERS:-4} \
  $B/torchd serve --access-log=false --model-store "$W/store" \
  --models resnet50_fp16=resnet50_fp16.mar,resnet18=resnet18.mar > "$W/serve.log" 2>&1 &
spid=$!
for _ in $(seq 1 240); do curl -sf localhost:8080/ping >/dev/null && break; sleep 0.5; done
python3 "$G/check.py" http://localhost:8080 resnet18 "$W/resnet18" 5e-3 1,2,7,32
python3 "$G/check.py" http://localhost:8080 resnet50_fp16 "$W/resnet50_fp16" 0.1 1,8
for c in 1 128; do echo "resnet50_fp16 c=$c"; $PA -m resnet50_fp16 --concurrency-range $c 2>&1 | grep -E 'Throughput|p50|p99'; done
curl -s localhost:8082/metrics | grep -E '^torchd_batch_size_(sum|count)\{model="resnet50'

echo "== $(date -u +%T) the CUDA package"
wait $pt2pid; grep -v -i warn "$W/pt2.log"
$B/torchd archive --model-name resnet18_pt2 --version 1.0 --serialized-file "$W/resnet18_cuda.pt2" \
  --config-file "$G/resnet18.toml" --export-path "$W/store" --archive-format zip-store --force >/dev/null
curl -s -X POST "localhost:8081/models?url=resnet18_pt2.mar&batch_size=32&initial_workers=2&synchronous=true"; echo
python3 "$G/check.py" http://localhost:8080 resnet18_pt2 "$W/resnet18" 5e-3 1,2,7,32 33
for c in ${PT2_CONCURRENCY:-1 32}; do for m in resnet18_pt2 resnet18; do
  echo "$m c=$c"; $PA -m $m --concurrency-range $c 2>&1 | grep -E 'Throughput|p50|p99'; done; done
kill -INT $spid; wait $spid
echo "== $(date -u +%T) done"
