#!/usr/bin/env bash
# One intra-op thread per worker against cores / workers, under load: two torchd servers
# (--threads 1 and --threads 2, ports 18710 and 18720) each serve digits_tensor (batch 32,
# no delay) and resnet18 (batch 8, no delay), one worker; every round runs each point with
# `ab -k` on both servers in a shuffled order. Prints "round model c=N threads=T req/s".
# Needs `make build archives`. Usage: bench/threads-ab.sh [rounds]   (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null' EXIT
for t in 1 2; do
  cache=$(mktemp -d)
  TORCHD_CACHE_DIR=$cache bin/torchd serve --model-store model-store --inference-address 127.0.0.1:187${t}0 \
    --management-address 127.0.0.1:187${t}1 --metrics-address 127.0.0.1:187${t}2 --access-log=false \
    --enable-snapshots=false --job-queue-size 1024 --threads $t --grpc-address= --grpc-inference-address= --grpc-management-address= >/tmp/threads-ab-$t.log 2>&1 &
  pids+=($!)
done
for t in 1 2; do
  until curl -sf http://127.0.0.1:187${t}0/ping >/dev/null; do sleep 0.2; done
  curl -sf -XPOST "http://127.0.0.1:187${t}1/models?url=digits_tensor.mar&model_name=d&initial_workers=1&synchronous=true&batch_size=32&max_batch_delay=0" >/dev/null
  curl -sf -XPOST "http://127.0.0.1:187${t}1/models?url=resnet18.mar&model_name=r&initial_workers=1&synchronous=true&batch_size=8&max_batch_delay=0" >/dev/null
done
for r in $(seq "$rounds"); do
  for spec in "d 1 4" "d 8 4" "d 16 4" "d 64 4" "r 1 6" "r 8 6" "r 64 8"; do
    set -- $spec
    if [ "$1" = d ]; then ct=application/x-npy; body=models/out/digits/sample_tensor.npy
    else ct=image/jpeg; body=models/out/resnet18/sample_640x480.jpg; fi
    for t in $(shuf -e 1 2); do
      x=$(ab -k -q -c "$2" -t "$3" -n 10000000 -T $ct -p $body http://127.0.0.1:187${t}0/predictions/$1 2>&1 |
        awk '/Requests per second/ {print $4}')
      echo "$r $1 c=$2 threads=$t $x"
    done
  done
done
