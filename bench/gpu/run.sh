#!/bin/bash
# The GPU check, run on a machine with an NVIDIA GPU and a CUDA PyTorch (python3), from the
# folder bench/gpu/bundle.sh made (build/gpucheck, carried there as it is):
#   1. torchd loads its C ABI built against that machine's LibTorch and sees the GPU;
#   2. TorchScript resnet18 (fp32) and an AOTInductor package of it compiled there for CUDA
#      (batch 1..32) answer through KServe v2 as eager PyTorch on the same GPU, at batch sizes
#      1, 2, 7 and 32; a 33-row request to the package is refused;
#   3. perf_analyzer over HTTP: resnet50 fp16 at c=1 and c=128 (WORKERS workers), and resnet18
#      TorchScript against its package at c=1 and c=32, beside the in-process forward.
#   4. with BASELINE_BIN=dir (a folder holding an older torchd, its libtorchd_c.so and libtorch.so
#      stand-in, as bundle.sh makes in baseline/ with BASELINE=rev): resnet50 fp16 at c=PAIRED_C
#      (128) with WORKERS workers, served by the baseline and by this build in turn, in the
#      order baseline, new, new, baseline (ROUNDS times; 1), each on a fresh server, so that the
#      ratio new/baseline comes from one machine. PAIRED_ONLY=1 runs step 4 alone (after step 1).
# Output goes to $OUT (log.txt, cpu.pprof of the resnet50 run, paired.txt). Nothing is asserted
# by exit code beyond the steps running; the log holds PASS/FAIL lines and the figures.
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
[ -f "$B/REVISION" ] && echo "this build: $(cat "$B/REVISION")"

# paired_point BIN LABEL ROUND: one fresh server of BIN/torchd serving resnet50_fp16, one
# perf_analyzer point after a short warm-up; a line "PAIRED label round=R throughput=... p50_us=...
# p99_us=... mean_batch=..." to paired.txt (perf_analyzer's own log stays in WORK).
paired_point() {
  TORCHD_MAX_REQUEST_SIZE=67108864 TORCHD_DEVICE=cuda:0 WORKERS=${WORKERS:-4} \
    "$1/torchd" serve --access-log=false --model-store "$W/store" --models resnet50_fp16=resnet50_fp16.mar \
    > "$W/serve-$2-$3.log" 2>&1 &
  local pid=$! up=
  for _ in $(seq 1 240); do curl -sf localhost:8080/ping >/dev/null && { up=1; break; }; sleep 0.5; done
  if [ -z "$up" ]; then echo "FAIL $2 round $3: no /ping"; tail -5 "$W/serve-$2-$3.log"; kill -9 $pid; wait $pid 2>/dev/null; return; fi
  # The new build's answers, once, before its first point.
  [ "$2/$3" = new/1 ] && python3 "$G/check.py" http://localhost:8080 resnet50_fp16 "$W/resnet50_fp16" 0.1 1,8
  $PA -m resnet50_fp16 --concurrency-range ${PAIRED_C:-128} --measurement-interval 2000 --max-trials 1 >/dev/null 2>&1 # warm-up
  local m0 m1
  m0=$(curl -s localhost:8082/metrics | awk '/^torchd_batch_size_(sum|count)\{model="resnet50_fp16"/{printf "%s ", $2}')
  $PA -m resnet50_fp16 --concurrency-range ${PAIRED_C:-128} > "$W/pa-$2-$3.log" 2>&1
  m1=$(curl -s localhost:8082/metrics | awk '/^torchd_batch_size_(sum|count)\{model="resnet50_fp16"/{printf "%s ", $2}')
  kill -INT $pid; wait $pid
  # perf_analyzer's last "Throughput: N infer/sec", "p50 latency: N usec" and "p99 latency: N usec";
  # the mean batch of the measured part from the metrics' sum and count before and after it.
  awk -v l="$2" -v r="$3" -v m0="$m0" -v m1="$m1" '/Throughput:/{tp=$2} /p50 latency:/{p50=$3} /p99 latency:/{p99=$3}
    END{split(m0,a," "); split(m1,b," "); mb=(b[2]-a[2]>0)?(b[1]-a[1])/(b[2]-a[2]):0
        if (tp=="") {print "FAIL " l " round " r ": no throughput from perf_analyzer"; exit}
        printf "PAIRED %s round=%s throughput=%s p50_us=%s p99_us=%s mean_batch=%.1f\n", l, r, tp, p50, p99, mb}' \
    "$W/pa-$2-$3.log" | tee -a "$O/paired.txt"
}

paired() {
  [ -n "${BASELINE_BIN:-}" ] || return 0
  local base new=$B
  base=$(cd "$G" && cd "$BASELINE_BIN" && pwd) || { echo "FAIL BASELINE_BIN=$BASELINE_BIN is no folder"; return; }
  echo "== $(date -u +%T) paired: baseline $base ($(cat "$base/REVISION" 2>/dev/null)) against this build, c=${PAIRED_C:-128}, WORKERS=${WORKERS:-4}"
  "$base/torchd" version || return
  rm -f "$O/paired.txt"
  for r in $(seq 1 ${ROUNDS:-1}); do
    paired_point "$base" baseline $r; paired_point "$new" new $r
    paired_point "$new" new $r.b; paired_point "$base" baseline $r.b
  done
  awk '/^PAIRED (baseline|new) round=/{split($4,t,"="); n[$2]++; s[$2]+=t[2]} END{if(n["baseline"]&&n["new"]&&s["baseline"]>0)
    printf "PAIRED mean throughput: baseline %.0f inf/s (%d points), new %.0f inf/s (%d points): new/baseline %.3f\n", s["baseline"]/n["baseline"], n["baseline"], s["new"]/n["new"], n["new"], (s["new"]/n["new"])/(s["baseline"]/n["baseline"])}' \
    "$O/paired.txt" | tee -a "$O/paired.txt"
}

if [ "${PAIRED_ONLY:-0}" = 1 ]; then
  python3 "$G/export.py" "$W" r50 2>&1 | grep -v -i warn
  $B/torchd archive --model-name resnet50_fp16 --version 1.0 --serialized-file "$W/resnet50_fp16.pt" \
    --config-file "$G/resnet50_fp16.toml" --export-path "$W/store" --archive-format zip-store --force >/dev/null || exit 1
  paired
  echo "== $(date -u +%T) done"
  exit 0
fi

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
paired
echo "== $(date -u +%T) done"
