#!/usr/bin/env bash
# The engine's paired run (issue 41), in one run on a quiet machine. resnet18 is registered as
# users start (BATCH_SIZE=32 WORKERS=2, job_queue_size 1024) on two torchd binaries, BEFORE
# (a build without the engine change) and AFTER (bin/torchd), next to the Python batching
# peer (bench/peers/tornado_batching.py, one forward on 2 threads). Each round runs every
# concurrency on the three servers in a shuffled order with `ab -k` and the 640×480 photo.
# Prints lines to paste:
#   inproc single_ms=M                    bench-model's one request on every core (the c=1 bound)
#   R c=N server=S rps=X p50_ms=Y p99_ms=Z
#   rss server=S idle_mb=I peak_mb=P after_mb=A   peak over the c=256 runs; A: 60 s after them
# The figures "Done means" asks for: p50 at c=1 of after ≤ single_ms + 1 and ≤ tornado's;
# rps(after)/rps(before) at c=8…64 (median over rounds) ≥ 0.97; after_mb ≤ 1.5 × idle_mb.
# Peak RSS against TorchServe's comes from `make bench` (bench/harness), which runs TorchServe.
# resnet18's archive lingers 5 ms for a batch to fill (max_batch_delay), which a c=1 request
# waits out in full: the c=1 bound leaves no room for it, so compare that line from a run with
# LINGER_MS=0 (the environment passes through to both torchd servers), as bench/harness does.
#
# Needs `make build archives bench-setup`. Usage:
#   BEFORE=/tmp/before/bin/torchd bench/engine-ab.sh [rounds] [seconds per point]
# (default 3 rounds of 10 s; BENCH_QUICK=1: one round of 2 s, to check that it works;
# STORE: the model store, default model-store; NO_PEER=1 leaves the Python peer out).
set -euo pipefail
cd "$(dirname "$0")/.."
before=${BEFORE:?set BEFORE to the torchd binary without the change}
rounds=${1:-3}
secs=${2:-10}
concs="1 8 16 32 64"
if [ -n "${BENCH_QUICK:-}" ]; then rounds=1 secs=2 concs="1 8"; fi
body=models/out/resnet18/sample_640x480.jpg
store=${STORE:-model-store}
servers="before after"
[ -z "${NO_PEER:-}" ] && servers="$servers tornado"
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
export OMP_WAIT_POLICY=PASSIVE

declare -A port pid
start_torchd() { # name binary port
  TORCHD_CACHE_DIR=$work/cache-$1 BATCH_SIZE=32 WORKERS=2 "$2" serve --model-store "$store" \
    --models resnet18=resnet18.mar --inference-address 127.0.0.1:$3 --management-address 127.0.0.1:$(($3 + 1)) \
    --metrics-address 127.0.0.1:$(($3 + 2)) --access-log=false --enable-snapshots=false --job-queue-size 1024 \
    >"$work/$1.log" 2>&1 &
  pids+=($!) pid[$1]=$! port[$1]=$3
}
start_torchd before "$before" 18810
start_torchd after bin/torchd 18820
if [ -z "${NO_PEER:-}" ]; then
  .venv/bin/python bench/peers/tornado_batching.py --port 18830 --threads 2 >"$work/tornado.log" 2>&1 &
  pids+=($!) pid[tornado]=$! port[tornado]=18830
fi
for s in $servers; do
  until curl -sf http://127.0.0.1:${port[$s]}/ping >/dev/null; do
    kill -0 "${pid[$s]}" 2>/dev/null || { echo "$s exited:"; cat "$work/$s.log"; exit 1; }
    sleep 0.2
  done
done

rss_mb() { awk '/VmRSS/ {printf "%d", $2 / 1024}' /proc/$1/status; }
echo "inproc single_ms=$(bin/torchd bench-model --json --input $body --batch-sizes 1 --rounds 3 --time ${secs}s \
  "$store/resnet18.mar" |
  .venv/bin/python -c 'import json,sys; print("%.2f" % (json.load(sys.stdin)["single_ns"] / 1e6))')"

point() { # round server c
  ab -k -q -c "$3" -t "$secs" -n 10000000 -T image/jpeg -p $body http://127.0.0.1:${port[$2]}/predictions/resnet18 2>&1 |
    awk -v r="$1" -v s="$2" -v c="$3" '/Requests per second/ {rps=$4} /^  50%/ {p50=$2} /^  99%/ {p99=$2}
      END {printf "%s c=%s server=%s rps=%s p50_ms=%s p99_ms=%s\n", r, c, s, rps, p50, p99}'
}
for r in $(seq "$rounds"); do
  for c in $concs; do
    for s in $(shuf -e $servers); do point "$r" "$s" "$c"; done
  done
done

# Memory: idle, the peak over c=256 runs (sampled every 100 ms), and 60 s after the load.
declare -A idle peak
for s in before after; do idle[$s]=$(rss_mb ${pid[$s]}) peak[$s]=0; done
for s in $(shuf -e before after); do
  point mem "$s" 256 &
  load=$!
  while kill -0 $load 2>/dev/null; do
    m=$(rss_mb ${pid[$s]}); [ "$m" -gt "${peak[$s]}" ] && peak[$s]=$m
    sleep 0.1
  done
  wait $load
done
sleep "${AFTER_SECS:-60}"
for s in before after; do
  echo "rss server=$s idle_mb=${idle[$s]} peak_mb=${peak[$s]} after_mb=$(rss_mb ${pid[$s]})"
done
