#!/usr/bin/env bash
# Self-tuning batching against batch 32 at three delays, closed loop, many rounds: the focused
# A/B behind the lingering rules of tuner/step.go (dirLinger). One torchd (ports
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
. bench/serve.sh
serve 19590 /tmp/linger-ab-torchd.log TORCHD_LOG_LEVEL=debug
reg digits_tensor auto "batch_size=auto&max_batch_delay=auto"
reg digits_tensor d0 "batch_size=32&max_batch_delay=0&threads=1"
reg digits_tensor d0copy "batch_size=32&max_batch_delay=0&threads=1"
reg digits_tensor d2 "batch_size=32&max_batch_delay=2&threads=1"
reg digits_tensor d5 "batch_size=32&max_batch_delay=5&threads=1"
for c in $concs; do
  for r in $(seq "$rounds"); do
    for m in $(printf '%s\n' auto d0 d0copy d2 d5 | shuf); do
      x=$(ab -k -q -c "$c" -t 4 -n 10000000 -s 120 -T application/x-npy -p models/out/digits/sample_tensor.npy "http://$inf/predictions/$m" 2>&1 | awk '/Requests per second/ {print $4}')
      echo "c=$c round=$r $m $x"
    done
  done
done
curl -s "http://$mg/models/auto" >/tmp/linger-ab-describe.json
