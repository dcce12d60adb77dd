#!/usr/bin/env bash
# Identical registrations against each other: one torchd (ports 19590–19592) serves resnet18
# four times under the names a, b, c, d (registered in that order), each batch 16, no delay,
# one worker, default threads; every round runs each with `ab -k -c 64` for 6 s in a shuffled
# order. Prints "round=R name req/s". On the 2-core VM (2026-11-23 07:28 UTC, 6 rounds) the
# last one registered served 1.17 times the median of the other three, first in every round
# (docs/benchmarks.md, issue 9, session 15): the offset that the bench-auto reports' "two
# copies" column measures. Needs `make build archives`. Usage: bench/copies-ab.sh [rounds]
set -uo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-6}
inf=127.0.0.1:19590 mg=127.0.0.1:19591
cache=$(mktemp -d)
TORCHD_CACHE_DIR=$cache bin/torchd serve --model-store model-store --inference-address $inf --management-address $mg \
  --metrics-address 127.0.0.1:19592 --access-log=false --enable-snapshots=false --job-queue-size 1024 >/tmp/copies-ab-torchd.log 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait 2>/dev/null; rm -rf "$cache"' EXIT
until curl -sf http://$inf/ping >/dev/null; do sleep 0.2; done
for n in a b c d; do
  curl -sf -X POST "http://$mg/models?url=resnet18.mar&model_name=$n&initial_workers=1&synchronous=true&batch_size=16&max_batch_delay=0" >/dev/null || echo "register $n failed" >&2
done
for r in $(seq "$rounds"); do
  for m in $(printf '%s\n' a b c d | shuf); do
    x=$(ab -k -q -c 64 -t 6 -n 10000000 -s 120 -T image/jpeg -p models/out/resnet18/sample_640x480.jpg "http://$inf/predictions/$m" 2>&1 | awk '/Requests per second/ {print $4}')
    echo "round=$r $m $x"
  done
done
