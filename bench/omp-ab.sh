#!/usr/bin/env bash
# libgomp's wait policy under load, PASSIVE (torchd's default) against ACTIVE (libgomp's own
# default: team threads spin at barriers before they sleep): two torchd servers (ports 19710
# and 19720), each serving digits (PNG, batch 32), digits_tensor (.npy, batch 32) and resnet18
# (batch 8), no delay, one worker, default threads. Every round runs each point with `ab -k`
# on both servers in a shuffled order. Prints "round model c=N omp=POLICY req/s p50_ms".
# Needs `make build archives`. Usage: bench/omp-ab.sh [rounds]   (default 3)
set -uo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
. bench/serve.sh
declare -A infs
for policy in PASSIVE ACTIVE; do
  port=19710
  [ "$policy" = ACTIVE ] && port=19720
  serve $port /tmp/omp-ab-$policy.log OMP_WAIT_POLICY=$policy
  infs[$policy]=$inf
  reg digits d "batch_size=32&max_batch_delay=0"
  reg digits_tensor t "batch_size=32&max_batch_delay=0"
  reg resnet18 r "batch_size=8&max_batch_delay=0"
done
for r in $(seq "$rounds"); do
  for spec in "d 32 4" "t 1 4" "t 32 4" "r 1 6" "r 16 6" "r 64 8"; do
    set -- $spec
    case $1 in
      d) ct=image/png body=models/out/digits/sample.png ;;
      t) ct=application/x-npy body=models/out/digits/sample_tensor.npy ;;
      r) ct=image/jpeg body=models/out/resnet18/sample_640x480.jpg ;;
    esac
    for policy in $(shuf -e PASSIVE ACTIVE); do
      ab -k -q -c "$2" -t "$3" -n 10000000 -s 120 -T $ct -p $body "http://${infs[$policy]}/predictions/$1" 2>&1 |
        awk -v r="$r" -v m="$1" -v c="$2" -v p="$policy" '/Requests per second/ {rps=$4} /^ +50%/ {p50=$2} END {print r, m, "c=" c, "omp=" p, rps, p50}'
    done
  done
done
