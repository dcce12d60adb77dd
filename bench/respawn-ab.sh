#!/usr/bin/env bash
# Where does the per-registration offset live: in the model (its weights, loaded once) or in
# its worker (a locked OS thread, with its own OpenMP team and malloc arena)? One torchd
# (ports 19630–19632) serves resnet18 four times (a, b, c, d: batch 16, no delay, one
# worker, default threads). Each phase runs ROUNDS shuffled rounds of `ab -k -c C` for S
# seconds on each; between phases every worker is replaced (scaled to 0 workers and back to
# 1: a new OS thread on the same loaded model). If the offsets follow the model, the fast
# registration stays fast across phases; if they follow the worker, the order reshuffles at
# each respawn and holds within a phase. Prints "phase round name req/s".
# Needs `make build archives`. Usage: [C=8] [S=6] bench/respawn-ab.sh [phases] [rounds]
set -uo pipefail
cd "$(dirname "$0")/.."
phases=${1:-3} rounds=${2:-4} c=${C:-8} s=${S:-6}
. bench/serve.sh
serve 19630 /tmp/respawn-ab-torchd.log
for n in a b c d; do reg resnet18 $n "batch_size=16&max_batch_delay=0"; done
for p in $(seq "$phases"); do
  if [ "$p" -gt 1 ]; then
    for n in a b c d; do
      curl -sf -X PUT "http://$mg/models/$n?min_worker=0&synchronous=true" >/dev/null &&
        curl -sf -X PUT "http://$mg/models/$n?min_worker=1&synchronous=true" >/dev/null ||
        echo "respawn $n failed" >&2
    done
  fi
  for r in $(seq "$rounds"); do
    for m in $(printf '%s\n' a b c d | shuf); do
      x=$(ab -k -q -c "$c" -t "$s" -n 10000000 -s 120 -T image/jpeg -p models/out/resnet18/sample_640x480.jpg \
        "http://$inf/predictions/$m" 2>&1 | awk '/Requests per second/ {print $4}')
      echo "$p $r $m $x"
    done
  done
done
