#!/usr/bin/env bash
# Self-tuning batching against batch 32 at three delays, closed loop, many rounds: the focused
# A/B behind the lingering rules of daemon/autotune.go (dirLinger). One torchd (ports
# 19590–19592) serves digits_tensor five times, one worker each: `auto` (batch_size and
# max_batch_delay auto, threads tuned), and batch 32 on one intra-op thread at 0 ms (twice:
# d0, d0copy), 2 ms (d2) and 5 ms (d5). Each round runs every variant once with `ab -k` for 4 s,
# in a shuffled order. Prints "c=N round=R variant req/s"; the tuner's log (debug) goes to
# /tmp/linger-ab-torchd.log and the final describe of auto to /tmp/linger-ab-describe.json.
# Needs `make build archives`. Usage: bench/linger-ab.sh [rounds] [concurrencies]
# (default 12 "64 256")
set -uo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-12} concs=${2:-"64 256"}
inf=127.0.0.1:19590 mg=127.0.0.1:19591
cache=$(mktemp -d)
TORCHD_LOG_LEVEL=debug TORCHD_CACHE_DIR=$cache bin/torchd serve --model-store model-store --inference-address $inf --management-address $mg \
  --metrics-address 127.0.0.1:19592 --access-log=false --enable-snapshots=false --job-queue-size 1024 >/tmp/linger-ab-torchd.log 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait 2>/dev/null; rm -rf "$cache"' EXIT
until curl -sf http://$inf/ping >/dev/null; do sleep 0.2; done
reg() { curl -sf -X POST "http://$mg/models?url=digits_tensor.mar&model_name=$1&initial_workers=1&synchronous=true&$2" >/dev/null || echo "register $1 failed" >&2; }
reg auto "batch_size=auto&max_batch_delay=auto"
reg d0 "batch_size=32&max_batch_delay=0&threads=1"
reg d0copy "batch_size=32&max_batch_delay=0&threads=1"
reg d2 "batch_size=32&max_batch_delay=2&threads=1"
reg d5 "batch_size=32&max_batch_delay=5&threads=1"
for c in $concs; do
  for r in $(seq "$rounds"); do
    for m in $(printf '%s\n' auto d0 d0copy d2 d5 | shuf); do
      x=$(ab -k -q -c "$c" -t 4 -n 10000000 -s 120 -T application/x-npy -p models/out/digits/sample_tensor.npy "http://$inf/predictions/$m" 2>&1 | awk '/Requests per second/ {print $4}')
      echo "c=$c round=$r $m $x"
    done
  done
done
curl -s "http://$mg/models/auto" >/tmp/linger-ab-describe.json
