#!/usr/bin/env bash
# The machine's idle CPU while `ab -k` drives one fixed setting: is there an idle core for a
# second intra-op thread? (The self-tuning batching probes more threads only with 0.6 cores
# idle: tuner/step.go, dirThreads.) One torchd (ports 19580–19582) serves digits_tensor
# (batch 32, no delay) and resnet18 (batch 8, no delay) at 1 and at 2 intra-op threads, one
# worker each; each point reads /proc/stat before and after. Prints
# "model c=N rps=R idle=I steal=S" (I, S: shares of the machine's CPU time).
# Needs `make build archives`. Usage: bench/idle-cpu.sh [rounds]   (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
. bench/serve.sh
serve 19580 /tmp/idle-cpu.log
for t in 1 2; do
  reg digits_tensor d$t "batch_size=32&max_batch_delay=0&threads=$t"
  reg resnet18 r$t "batch_size=8&max_batch_delay=0&threads=$t"
done
cpu() { head -1 /proc/stat | awk '{t = 0; for (i = 2; i <= 9; i++) t += $i; print t, $5 + $6, $9}'; }
point() { # model c seconds file content-type
  local t0 i0 s0 t1 i1 s1 r
  read -r t0 i0 s0 < <(cpu)
  r=$(ab -k -q -c "$2" -t "$3" -n 10000000 -T "$5" -p "$4" "http://$inf/predictions/$1" 2>&1 | awk '/Requests per second/ {print $4}')
  read -r t1 i1 s1 < <(cpu)
  awk -v m="$1" -v c="$2" -v r="$r" -v i=$((i1 - i0)) -v s=$((s1 - s0)) -v t=$((t1 - t0)) \
    'BEGIN {printf "%s c=%d rps=%s idle=%.2f steal=%.3f\n", m, c, r, i / t, s / t}'
}
for _ in $(seq "$rounds"); do
  for c in 1 8 16 64 256; do for m in d1 d2; do point $m $c 4 models/out/digits/sample_tensor.npy application/x-npy; done; done
  for c in 1 8 64; do for m in r1 r2; do point $m $c 6 models/out/resnet18/sample_640x480.jpg image/jpeg; done; done
done
