#!/usr/bin/env bash
# keep_freed_memory (the default) against glibc's malloc defaults, under load: two torchd
# servers, kept (ports 19630–19632) and TORCHD_KEEP_FREED_MEMORY=false (19640–19642), each
# serve two identical registrations of resnet18 (r1, r2: batch RB, default 16) and of
# digits_tensor (d1, d2: batch 32), no delay, one worker, default threads. Every round runs
# each point on all four (server, copy) pairs in a shuffled order with `ab -k`. Prints
# "round model c=N kept|glibc copy=1|2 req/s faults/req" (the server's minor page faults over
# the run, per request) and each server's VmRSS at the end.
# POINTS="model c seconds,..." picks the points (default "r 64 6,r 1 6,d 64 4").
# Needs `make build archives`. Usage: [POINTS=...] [RB=...] bench/malloc-ab.sh [rounds]   (default 5)
set -uo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
IFS=, read -ra points <<<"${POINTS:-r 64 6,r 1 6,d 64 4}"
. bench/serve.sh
declare -A infs pidof
serve 19630 /tmp/malloc-ab-kept.log
infs[kept]=$inf pidof[kept]=${pids[0]}
for m in r1 r2; do reg resnet18 $m "batch_size=${RB:-16}&max_batch_delay=0"; done
for m in d1 d2; do reg digits_tensor $m "batch_size=32&max_batch_delay=0"; done
serve 19640 /tmp/malloc-ab-glibc.log TORCHD_KEEP_FREED_MEMORY=false
infs[glibc]=$inf pidof[glibc]=${pids[1]}
for m in r1 r2; do reg resnet18 $m "batch_size=${RB:-16}&max_batch_delay=0"; done
for m in d1 d2; do reg digits_tensor $m "batch_size=32&max_batch_delay=0"; done
faults() { awk '{print $10}' "/proc/$1/stat"; }
for r in $(seq "$rounds"); do
  for spec in "${points[@]}"; do
    set -- $spec
    if [ "$1" = d ]; then ct=application/x-npy body=models/out/digits/sample_tensor.npy
    else ct=image/jpeg body=models/out/resnet18/sample_640x480.jpg; fi
    for pair in $(shuf -e kept,1 kept,2 glibc,1 glibc,2); do
      a=${pair%,*} k=${pair#*,}
      f0=$(faults "${pidof[$a]}")
      out=$(ab -k -q -c "$2" -t "$3" -n 10000000 -s 120 -T $ct -p $body "http://${infs[$a]}/predictions/$1$k" 2>&1)
      f1=$(faults "${pidof[$a]}")
      n=$(awk '/Complete requests/ {print $3}' <<<"$out")
      echo "$r $1 c=$2 $a copy=$k $(awk '/Requests per second/ {print $4}' <<<"$out") $(( (f1 - f0) / (n > 0 ? n : 1) ))"
    done
  done
done
for a in kept glibc; do echo "$a $(grep VmRSS "/proc/${pidof[$a]}/status")"; done
