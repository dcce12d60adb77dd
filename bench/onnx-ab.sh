#!/usr/bin/env bash
# Two torchd binaries, A and B, serving the same ONNX repository at once (A on ports 1828x, B on
# 1838x), driven alternately with ab -k and the same Open Inference Protocol JSON bodies as
# bench/onnx.sh: ONNX MNIST at c=8, the BERT classifier at c=32, the ceiling's trivial model
# (bench/onnx/bodies.py) at both, and GET /v2/health/ready at c=8. Each round runs every
# (target, binary) pair once, the order shuffled; medians and B/A printed, of the rate and of
# the server's own CPU a request (its utime + stime over the run, from /proc: on a machine
# shared with other work the rate follows the load, the CPU a request much less). Both
# servers are up throughout, idle while the other is driven.
#
# Usage: bench/onnx-ab.sh A-BINARY B-BINARY [seconds-per-run] [rounds] [targets]
#        (default 5 5 "mnist bert trivial5 trivial1 ready")
set -euo pipefail
cd "$(dirname "$0")/.."
a=$1 b=$2 secs=${3:-5} rounds=${4:-5} only=${5:-"mnist bert trivial5 trivial1 ready"}
py=.venv/bin/python
out=$(mktemp -d /tmp/onnx-ab.XXXXXX)
mkdir -p "$out/repo"
cp -r models/out/onnx/repos/mnist/onnx-mnist-cpu models/out/triton_text/repo/transformer_onnx_model "$out/repo/"
$py bench/onnx/bodies.py "$out"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$out"' EXIT
for side in A B; do
  bin=$a base=1828; [ $side = B ] && bin=$b base=1838
  "$bin" serve --access-log=false --model-repository "$out/repo" --enable-snapshots=false \
    --inference-address 127.0.0.1:${base}0 --management-address 127.0.0.1:${base}1 --metrics-address 127.0.0.1:${base}2 \
    --grpc-address 127.0.0.1:${base}3 --grpc-inference-address= --grpc-management-address= 2>"$out/torchd-$side.log" &
  pids+=($!)
done
for base in 1828 1838; do
  for m in onnx-mnist-cpu transformer_onnx_model trivial5 trivial1; do
    for _ in $(seq 1 240); do curl -sf "127.0.0.1:${base}0/v2/models/$m/ready" >/dev/null && break; sleep 0.5; done
  done
done

# ab's requests per second; failed or non-2xx requests fail the run.
ab_rate() {
  local url=$1 body=$2 c=$3 res
  if [ -n "$body" ]; then res=$(ab -q -k -c "$c" -t "$secs" -n 10000000 -T application/json -p "$body" "$url" 2>&1)
  else res=$(ab -q -k -c "$c" -t "$secs" -n 10000000 "$url" 2>&1); fi
  if grep -qE '^(Failed requests|Non-2xx responses):\s+[1-9]' <<<"$res"; then echo "ab: failures at $url" >&2; exit 1; fi
  awk '/Requests per second/ {print $4}' <<<"$res"
}
# the process's user + system CPU ticks so far
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

# target: name c path body
targets=("mnist 8 v2/models/onnx-mnist-cpu/infer mnist.json" "bert 32 v2/models/transformer_onnx_model/infer bert.json"
  "trivial5 8 v2/models/trivial5/infer trivial.json" "trivial1 32 v2/models/trivial1/infer trivial.json" "ready 8 v2/health/ready -")
declare -A runs cpu
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$rounds"); do
  for pair in $(for t in "${!targets[@]}"; do
                  grep -qw "${targets[$t]%% *}" <<<"$only" && echo "$t/A" && echo "$t/B"; done | shuf); do
    read -r name c path body <<<"${targets[${pair%/*}]}"
    side=${pair#*/} port=18280; [ "$side" = B ] && port=18380
    [ "$body" = - ] && body= || body=$out/$body
    pid=${pids[0]}; [ "$side" = B ] && pid=${pids[1]}
    t0=$(cpu_ticks "$pid")
    v=$(ab_rate "http://127.0.0.1:$port/$path" "$body" "$c")
    us=$(awk -v t="$(( $(cpu_ticks "$pid") - t0 ))" -v hz="$(getconf CLK_TCK)" -v v="$v" -v s="$secs" 'BEGIN {printf "%.1f", t / hz * 1e6 / (v * s)}')
    echo "round $r $name c=$c $side: $v/s, $us µs CPU a request (load $(cut -d' ' -f1 /proc/loadavg))"
    runs[$name-$side]+="$v "
    cpu[$name-$side]+="$us "
  done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| target | c | A req/s | B req/s | B / A | A µs CPU a request | B µs CPU a request | B / A |"
echo "|---|---|---|---|---|---|---|---|"
for t in "${targets[@]}"; do
  read -r name c _ _ <<<"$t"
  grep -qw "$name" <<<"$only" || continue
  x=$(tr ' ' '\n' <<<"${runs[$name-A]}" | grep . | median)
  y=$(tr ' ' '\n' <<<"${runs[$name-B]}" | grep . | median)
  p=$(tr ' ' '\n' <<<"${cpu[$name-A]}" | grep . | median)
  q=$(tr ' ' '\n' <<<"${cpu[$name-B]}" | grep . | median)
  echo "| $name | $c | $x | $y | $(awk -v a="$x" -v b="$y" 'BEGIN {printf "%.2f", b/a}') | $p | $q | $(awk -v a="$p" -v b="$q" 'BEGIN {printf "%.2f", b/a}') |"
done
