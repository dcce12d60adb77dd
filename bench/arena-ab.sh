#!/usr/bin/env bash
# glibc's malloc arenas against one arena, under load: two torchd servers, the default
# (ports 19610–19612) and MALLOC_ARENA_MAX=1 (19620–19622), each serve two identical
# registrations of resnet18 (r1, r2: batch 16) and of digits_tensor (d1, d2: batch 32), no
# delay, one worker, default threads, registered in that order. Every round runs each point
# on all four (server, copy) pairs in a shuffled order with `ab -k`. Prints
# "round model c=N arena=default|1 copy=1|2 req/s". The per-copy split shows the
# per-registration offset (bench/copies-ab.sh); the server split shows what one arena costs.
# The offset's cause is glibc unmapping and trimming the activations' memory
# (bench/malloc-ab.sh); both servers run with keep_freed_memory on.
# POINTS="model c seconds,..." picks the points (default "r 64 6,r 1 6,d 64 4,d 1 4").
# Needs `make build archives`. Usage: [POINTS=...] bench/arena-ab.sh [rounds]   (default 6)
set -uo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-6}
IFS=, read -ra points <<<"${POINTS:-r 64 6,r 1 6,d 64 4,d 1 4}"
. bench/serve.sh
declare -A infs
serve 19610 /tmp/arena-ab-default.log MALLOC_ARENA_MAX=$((8 * $(nproc)))
infs[default]=$inf
for m in r1 r2; do reg resnet18 $m "batch_size=16&max_batch_delay=0"; done
for m in d1 d2; do reg digits_tensor $m "batch_size=32&max_batch_delay=0"; done
serve 19620 /tmp/arena-ab-1.log MALLOC_ARENA_MAX=1
infs[1]=$inf
for m in r1 r2; do reg resnet18 $m "batch_size=16&max_batch_delay=0"; done
for m in d1 d2; do reg digits_tensor $m "batch_size=32&max_batch_delay=0"; done
for r in $(seq "$rounds"); do
  for spec in "${points[@]}"; do
    set -- $spec
    if [ "$1" = d ]; then ct=application/x-npy body=models/out/digits/sample_tensor.npy
    else ct=image/jpeg body=models/out/resnet18/sample_640x480.jpg; fi
    for pair in $(shuf -e default,1 default,2 1,1 1,2); do
      a=${pair%,*} k=${pair#*,}
      x=$(ab -k -q -c "$2" -t "$3" -n 10000000 -s 120 -T $ct -p $body "http://${infs[$a]}/predictions/$1$k" 2>&1 |
        awk '/Requests per second/ {print $4}')
      echo "$r $1 c=$2 arena=$a copy=$k $x"
    done
  done
done
